// One agent pool served by a Logic App Standard (hosting 'logicApp' in main.bicep's agentPools; kind: logicApp
// in workflows/pools.yaml): the workflow of examples/logic-app-agent, a message-only agent on the app's
// message contract (docs/agents.md, "A Logic App as an agent"). What it creates:
//
//   a Workflow Standard plan (WS1)     unless workflowPlanId names an existing one to share
//   runtime storage                    a storage account of its own for the Logic Apps runtime (state, run
//                                      history), reached with the app's system identity: shared keys off
//   the Logic App                      kind functionapp,workflowapp, system-assigned identity, the workflows
//                                      extension bundle, and the workflow's parameters as app settings
//   its answer queue                   <RESULT_QUEUE_NAME>-answers-<8 characters of uniqueString(pool)>: the
//                                      app answers its asking heartbeats there
//
// Roles, each on the narrowest scope (docs/deploy.md, "Agent pools"):
//
//   the Logic App's identity           Azure Service Bus Data Receiver on the pool's work queue and on its
//                                      answer queue (receive, complete, abandon, dead-letter); Data Sender on
//                                      the result queue (heartbeats and replies); Storage Blob Data Owner,
//                                      Queue Data Contributor and Table Data Contributor on its runtime storage
//                                      only; Monitoring Metrics Publisher on Application Insights. No right
//                                      on the ledger, the payload container or any other queue.
//   the Function App's identity        Azure Service Bus Data Sender on the answer queue (it answers there).
//                                      Its Data Sender on the pool's work queue comes with every pool not
//                                      hosted by the app (role-assignments.bicep).
//
// The workflow itself is deployed onto the app after provisioning (docs/agents.md): Bicep has no way to
// upload a project's files without a secret-bearing package URL.

@description('The pool\'s name (workflows/pools.yaml).')
param poolName string

@description('<base name>-<resource token> of the deployment: the Logic App is logic-<it>-<pool>, its plan plan-<it>-<pool>, its runtime storage account stla<13 characters hashed from both>.')
param nameSuffix string

@description('Resource id of an existing Workflow Standard plan to share; empty = create one.')
param workflowPlanId string = ''

@description('Azure region.')
param location string

@description('Tags applied to every resource.')
param tags object = {}

@description('The pool\'s work queue (<WORK_QUEUE_NAME>-<pool>).')
param poolQueueName string

@description('Queue agents send step results to (RESULT_QUEUE_NAME).')
param resultQueueName string

@description('Service Bus namespace of the agent queues.')
param serviceBusNamespaceName string

@description('Principal id of the Function App\'s identity: it sends the answers.')
param appPrincipalId string

@description('The agent the workflow serves (work messages naming it are done).')
param agent string

@description('The compensator it serves (compensate messages naming it are undone); empty = the agent itself.')
param compensator string = ''

@description('The remote service: the workflow POSTs <serviceUrl>/work and <serviceUrl>/compensate with an Idempotency-Key header.')
param serviceUrl string

@description('Seconds the asking heartbeat moves the step\'s deadline: longer than the remote call.')
@minValue(1)
param heartbeatSeconds int = 300

@description('Application Insights component the Logic App sends its telemetry to.')
param applicationInsightsName string

var roles = {
  serviceBusDataReceiver: '4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0'
  serviceBusDataSender: '69a216fc-b8fb-44d8-bc22-1f3c2cd27a39'
  storageBlobDataOwner: 'b7e6dc6d-f1e8-4753-8033-0f276bb0955b'
  storageQueueDataContributor: '974c5e8b-45b9-4653-ba55-5f855dd0fb88'
  storageTableDataContributor: '0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3'
  monitoringMetricsPublisher: '3913510d-42f4-4e42-8a64-420c390055eb'
}
// The Node example's answer queues carry 8 characters after the prefix too (RESULT_QUEUE_NAME is at most 46).
var answerQueueName = '${resultQueueName}-answers-${take(uniqueString(poolName), 8)}'
var name = 'logic-${nameSuffix}-${poolName}'
var planName = 'plan-${nameSuffix}-${poolName}'
var storageAccountName = 'stla${uniqueString(nameSuffix, poolName)}'

resource serviceBus 'Microsoft.ServiceBus/namespaces@2024-01-01' existing = {
  name: serviceBusNamespaceName
}

resource poolQueue 'Microsoft.ServiceBus/namespaces/queues@2024-01-01' existing = {
  parent: serviceBus
  name: poolQueueName
}

resource resultQueue 'Microsoft.ServiceBus/namespaces/queues@2024-01-01' existing = {
  parent: serviceBus
  name: resultQueueName
}

resource appInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: applicationInsightsName
}

// Answers live ten minutes at most (activities/replies/attempt_status.py, ANSWER_TTL): an unread one is of no use.
// The workflow's runs (at most 5 at once) share the queue: each abandons the answers of the others, so an
// answer is delivered several times before its own run takes it: at most 75 times in its 30-second wait (5
// runs polling every 2 s), far below 1000. One no run waits for any more expires, or is dead-lettered.
resource answerQueue 'Microsoft.ServiceBus/namespaces/queues@2024-01-01' = {
  parent: serviceBus
  name: answerQueueName
  properties: {
    lockDuration: 'PT5M'
    maxDeliveryCount: 1000
    defaultMessageTimeToLive: 'PT10M'
    deadLetteringOnMessageExpiration: false
    requiresSession: false
    enablePartitioning: false
    maxSizeInMegabytes: 1024
  }
}

resource runtimeStorage 'Microsoft.Storage/storageAccounts@2023-05-01' = {
  name: storageAccountName
  location: location
  tags: tags
  kind: 'StorageV2'
  sku: {
    name: 'Standard_LRS'
  }
  properties: {
    // checkov:skip=CKV_AZURE_35: The Logic App has no VNet integration, so it reaches its runtime storage over the public endpoint; access is Entra-only (shared keys disabled) and scoped by RBAC.
    // checkov:skip=CKV_AZURE_59: Same reason as CKV_AZURE_35: the public endpoint stays enabled.
    // checkov:skip=CKV_AZURE_206: The runtime's state and run history are the Logic App's own, not the ledger: LRS is enough (the ledger's account is the parameterised one).
    // checkov:skip=CKV_AZURE_43: The name is 'stla' + uniqueString(): 17 lower-case letters and digits (tests/infra checks the rule); checkov cannot evaluate uniqueString.
    // checkov:skip=CKV_AZURE_33: The runtime's queues are the Logic Apps engine's job queues; their requests are in the engine's own telemetry.
    accessTier: 'Hot'
    allowBlobPublicAccess: false
    allowSharedKeyAccess: false
    allowCrossTenantReplication: false
    defaultToOAuthAuthentication: true
    minimumTlsVersion: 'TLS1_2'
    supportsHttpsTrafficOnly: true
    publicNetworkAccess: 'Enabled'
    networkAcls: {
      bypass: 'AzureServices'
      defaultAction: 'Allow'
    }
    encryption: {
      keySource: 'Microsoft.Storage'
      requireInfrastructureEncryption: true
      services: {
        blob: {
          enabled: true
          keyType: 'Account'
        }
        file: {
          enabled: true
          keyType: 'Account'
        }
        queue: {
          enabled: true
          keyType: 'Account'
        }
        table: {
          enabled: true
          keyType: 'Account'
        }
      }
    }
  }
}

resource plan 'Microsoft.Web/serverfarms@2024-04-01' = if (empty(workflowPlanId)) {
  name: planName
  location: location
  tags: tags
  kind: 'elastic'
  sku: {
    name: 'WS1'
    tier: 'WorkflowStandard'
  }
  properties: {
    // checkov:skip=CKV_AZURE_225: One always-on WS1 instance per pool is the example's cost floor; zone redundancy triples it (docs/agents.md, costs).
    // checkov:skip=CKV_AZURE_211: WS1 is the smallest Workflow Standard plan: the example's load is one message at a time.
    maximumElasticWorkerCount: 3
    zoneRedundant: false
  }
}

resource logicApp 'Microsoft.Web/sites@2024-04-01' = {
  name: name
  location: location
  tags: tags
  kind: 'functionapp,workflowapp'
  identity: {
    type: 'SystemAssigned'
  }
  properties: {
    // checkov:skip=CKV_AZURE_222: The workflow has no request trigger: it only reads Service Bus. Its public endpoint serves the runtime's management calls; private endpoints are a later hardening step, as for the Function App.
    // checkov:skip=CKV_AZURE_17: No caller presents a client certificate: the workflow is triggered by Service Bus.
    // checkov:skip=CKV_AZURE_213: The runtime's health is its Service Bus trigger's: watched by the pool's dead-letter alert and the ledger's deadlines, not an HTTP health check.
    // checkov:skip=CKV_AZURE_88: The Logic App's state is in its runtime storage account (blobs, queues, tables), not in Azure Files.
    // checkov:skip=CKV_AZURE_212: Workflow Standard scales out elastically from one always-on instance; a fixed minimum above one would bill idle instances.
    serverFarmId: empty(workflowPlanId) ? plan.id : workflowPlanId
    httpsOnly: true
    clientCertEnabled: false
    publicNetworkAccess: 'Enabled'
    siteConfig: {
      minTlsVersion: '1.2'
      scmMinTlsVersion: '1.2'
      ftpsState: 'Disabled'
      http20Enabled: true
      netFrameworkVersion: 'v6.0'
      appSettings: [
        {
          name: 'APP_KIND'
          value: 'workflowApp'
        }
        {
          name: 'FUNCTIONS_EXTENSION_VERSION'
          value: '~4'
        }
        {
          name: 'FUNCTIONS_WORKER_RUNTIME'
          value: 'node'
        }
        {
          name: 'WEBSITE_NODE_DEFAULT_VERSION'
          value: '~18'
        }
        {
          name: 'AzureFunctionsJobHost__extensionBundle__id'
          value: 'Microsoft.Azure.Functions.ExtensionBundle.Workflows'
        }
        {
          name: 'AzureFunctionsJobHost__extensionBundle__version'
          value: '[1.*, 2.0.0)'
        }
        // The runtime's storage, reached with the system identity (no account key).
        {
          name: 'AzureWebJobsStorage__credential'
          value: 'managedidentity'
        }
        {
          name: 'AzureWebJobsStorage__blobServiceUri'
          value: runtimeStorage.properties.primaryEndpoints.blob
        }
        {
          name: 'AzureWebJobsStorage__queueServiceUri'
          value: runtimeStorage.properties.primaryEndpoints.queue
        }
        {
          name: 'AzureWebJobsStorage__tableServiceUri'
          value: runtimeStorage.properties.primaryEndpoints.table
        }
        {
          name: 'APPLICATIONINSIGHTS_CONNECTION_STRING'
          value: appInsights.properties.ConnectionString
        }
        {
          name: 'APPLICATIONINSIGHTS_AUTHENTICATION_STRING'
          value: 'Authorization=AAD'
        }
        // connections.json: the built-in Service Bus connector on the system identity.
        {
          name: 'serviceBus_fullyQualifiedNamespace'
          value: replace(replace(serviceBus.properties.serviceBusEndpoint, 'https://', ''), ':443/', '')
        }
        // parameters.json: the workflow's parameters.
        {
          name: 'SAS_POOL'
          value: poolName
        }
        {
          name: 'SAS_AGENT'
          value: agent
        }
        {
          name: 'SAS_COMPENSATOR'
          value: empty(compensator) ? agent : compensator
        }
        {
          name: 'SAS_WORK_QUEUE'
          value: poolQueueName
        }
        {
          name: 'SAS_RESULT_QUEUE'
          value: resultQueueName
        }
        {
          name: 'SAS_ANSWER_QUEUE'
          value: answerQueueName
        }
        {
          name: 'SAS_SERVICE_URL'
          value: serviceUrl
        }
        {
          name: 'SAS_HEARTBEAT_SECONDS'
          value: string(heartbeatSeconds)
        }
        {
          name: 'SAS_ASK_TIMEOUT'
          value: 'PT30S'
        }
      ]
    }
  }
}

// No publishing with user name + password: deployments authenticate with Entra ID.
resource scmBasicAuth 'Microsoft.Web/sites/basicPublishingCredentialsPolicies@2024-04-01' = {
  parent: logicApp
  name: 'scm'
  location: location
  properties: {
    allow: false
  }
}

resource ftpBasicAuth 'Microsoft.Web/sites/basicPublishingCredentialsPolicies@2024-04-01' = {
  parent: logicApp
  name: 'ftp'
  location: location
  properties: {
    allow: false
  }
}

resource workReceiver 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(poolQueue.id, logicApp.id, roles.serviceBusDataReceiver)
  scope: poolQueue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataReceiver)
    principalId: logicApp.identity.principalId
    principalType: 'ServicePrincipal'
  }
}

resource resultSender 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(resultQueue.id, logicApp.id, roles.serviceBusDataSender)
  scope: resultQueue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataSender)
    principalId: logicApp.identity.principalId
    principalType: 'ServicePrincipal'
  }
}

resource answerReceiver 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(answerQueue.id, logicApp.id, roles.serviceBusDataReceiver)
  scope: answerQueue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataReceiver)
    principalId: logicApp.identity.principalId
    principalType: 'ServicePrincipal'
  }
}

resource answerSender 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(answerQueue.id, appPrincipalId, roles.serviceBusDataSender)
  scope: answerQueue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataSender)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

resource runtimeBlobOwner 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(runtimeStorage.id, logicApp.id, roles.storageBlobDataOwner)
  scope: runtimeStorage
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageBlobDataOwner)
    principalId: logicApp.identity.principalId
    principalType: 'ServicePrincipal'
  }
}

resource runtimeQueueContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(runtimeStorage.id, logicApp.id, roles.storageQueueDataContributor)
  scope: runtimeStorage
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageQueueDataContributor)
    principalId: logicApp.identity.principalId
    principalType: 'ServicePrincipal'
  }
}

resource runtimeTableContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(runtimeStorage.id, logicApp.id, roles.storageTableDataContributor)
  scope: runtimeStorage
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageTableDataContributor)
    principalId: logicApp.identity.principalId
    principalType: 'ServicePrincipal'
  }
}

resource telemetryPublisher 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(appInsights.id, logicApp.id, roles.monitoringMetricsPublisher)
  scope: appInsights
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.monitoringMetricsPublisher)
    principalId: logicApp.identity.principalId
    principalType: 'ServicePrincipal'
  }
}

output name string = logicApp.name
output principalId string = logicApp.identity.principalId
output answerQueueName string = answerQueue.name
