// The Function App: Linux, Python 3.11, Flex Consumption (FC1), running as a user-assigned managed identity.
//
// Why Flex Consumption and not Elastic Premium: Flex Consumption supports Durable Functions on the default
// Azure Storage provider, timer triggers (the watchdog) and Service Bus triggers with identity-based
// connections, scales to zero, and scales the Durable (orchestrator/activity) functions as one group.
// Its constraints do not bite here: no deployment slots, no Windows, and app settings must not
// carry the deprecated FUNCTIONS_WORKER_RUNTIME / FUNCTIONS_EXTENSION_VERSION / WEBSITE_RUN_FROM_PACKAGE /
// WEBSITE_CONTENT* settings (runtime and deployment live in functionAppConfig instead).
//
// Every connection is identity-based: no connection string, account key or SAS key is stored anywhere.

@description('Globally unique Function App name (becomes <name>.azurewebsites.net).')
param name string

@description('Flex Consumption plan name.')
param planName string

@description('Azure region.')
param location string

@description('Tags applied to the plan and the app (the app also gets azd-service-name).')
param tags object = {}

@description('Resource id of the user-assigned managed identity the app runs as.')
param identityId string

@description('Client id of that identity (used by the Functions host and by azure-identity in the code).')
param identityClientId string

@description('Storage account behind AzureWebJobsStorage, the task hub, the ledger and the deployment package.')
param storageAccountName string

@description('Blob container that holds the deployment package.')
param deploymentContainerName string

@description('Service Bus namespace of the agent queues.')
param serviceBusNamespaceName string

@description('Application Insights component the app sends telemetry to.')
param applicationInsightsName string

@description('Maximum instances the app scales out to.')
@minValue(40)
@maxValue(1000)
param maximumInstanceCount int = 100

@description('Spread instances over availability zones (needs a region where Flex Consumption supports zones; the platform then keeps at least two always-ready instances per function group, which are billed).')
param zoneRedundant bool = false

@description('Memory of each instance, in MB.')
@allowed([
  2048
  4096
])
param instanceMemoryMB int = 2048

@description('Always-ready instances of the `durable` scale group (orchestrators + activities). The Durable Functions Azure Storage provider docs recommend 1 on Flex Consumption; with zone redundancy the platform keeps at least 2 per group.')
@minValue(0)
param durableAlwaysReadyInstanceCount int = 1

@description('Durable Functions backend: AzureStorage (task hub in the app\'s storage account) or DurableTaskScheduler (the managed Durable Task Scheduler).')
@allowed([
  'AzureStorage'
  'DurableTaskScheduler'
])
param durableBackend string = 'AzureStorage'

@description('Endpoint of the Durable Task Scheduler (https://<name>.<region>.durabletask.io); empty with the AzureStorage backend.')
param durableTaskSchedulerEndpoint string = ''

// Application settings read by workflow_core/settings.py (DOCUMENTED_SETTINGS).
param ledgerTableName string
param deadlineIndexTableName string
param workQueueName string
@description('HOSTED_POOLS: comma-separated agent pools whose work this app receives (one trigger each).')
param hostedPools string
@description('ANSWER_QUEUES: the Service Bus answer queues infra created (comma-separated), which sas doctor probes.')
param answerQueues string = ''
@description('Principal id of the app\'s identity (APP_PRINCIPAL_ID): sas doctor reads its roles back.')
param identityPrincipalId string = ''
@description('AGENT_POOL_IDENTITIES: [{ name, principalId, queue, scalesOnQueue, messageOnly, answerQueues }] of the pools served elsewhere, whose roles sas doctor reads back.')
param agentPoolIdentities array = []
param resultQueueName string
param deadLetterQueueName string
param maxDeliveryCount int
param watchdogSchedule string
@description('CANARY_SCHEDULE: NCRONTAB schedule of the recovery canary.')
param canarySchedule string = '0 0 * * * *'
@description('CANARY_ENABLED: run the recovery canary.')
param canaryEnabled bool = true
param watchdogBatchSize int
param watchdogGraceSeconds int
param maxCompensationRestarts int
param maxSchedulerTerminations int
param maxPayloadBytes int
param payloadContainerName string
param taskHubName string

var useDurableTaskScheduler = durableBackend == 'DurableTaskScheduler'

resource storage 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: storageAccountName
}

resource serviceBus 'Microsoft.ServiceBus/namespaces@2024-01-01' existing = {
  name: serviceBusNamespaceName
}

resource appInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: applicationInsightsName
}

resource plan 'Microsoft.Web/serverfarms@2024-04-01' = {
  name: planName
  location: location
  tags: tags
  kind: 'functionapp'
  sku: {
    name: 'FC1'
    tier: 'FlexConsumption'
  }
  properties: {
    // checkov:skip=CKV_AZURE_225: Zone redundancy is the zoneRedundant parameter (true in main.prod.bicepparam); dev stays single-zone to avoid billed always-ready instances.
    reserved: true
    zoneRedundant: zoneRedundant
  }
}

resource functionApp 'Microsoft.Web/sites@2024-04-01' = {
  name: name
  location: location
  tags: union(tags, {
    'azd-service-name': 'api'
  })
  kind: 'functionapp,linux'
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${identityId}': {}
    }
  }
  properties: {
    // checkov:skip=CKV_AZURE_222: The HTTP starter (POST /api/workflows/{name}/instances) is the app's public API; callers authenticate with function keys. Private endpoints are a later hardening step.
    // checkov:skip=CKV_AZURE_17: Callers of the HTTP starter present function keys, not client certificates; requiring mTLS would lock them out.
    // checkov:skip=CKV_AZURE_212: Flex Consumption has no fixed instance count: it scales per function group on demand (always-ready instances are the optional equivalent).
    // checkov:skip=CKV_AZURE_213: App Service health check is not a Flex Consumption feature; the Functions host's own health is monitored through Application Insights.
    // checkov:skip=CKV_AZURE_78: siteConfig.ftpsState is unsupported on Flex Consumption (ARM error 51021 in newer regions); FTP is disabled by the ftp basicPublishingCredentialsPolicy below.
    serverFarmId: plan.id
    httpsOnly: true
    clientCertEnabled: false
    publicNetworkAccess: 'Enabled'
    siteConfig: {
      minTlsVersion: '1.2'
      scmMinTlsVersion: '1.2'
      // No ftpsState (nor alwaysOn, linuxFxVersion, ...): Flex Consumption rejects them; FTP is off through the
      // ftp basicPublishingCredentialsPolicy.
      http20Enabled: true
      appSettings: concat([
        // Functions host + Durable Functions storage (identity-based AzureWebJobsStorage).
        {
          name: 'AzureWebJobsStorage__credential'
          value: 'managedidentity'
        }
        {
          name: 'AzureWebJobsStorage__clientId'
          value: identityClientId
        }
        {
          name: 'AzureWebJobsStorage__blobServiceUri'
          value: storage.properties.primaryEndpoints.blob
        }
        {
          name: 'AzureWebJobsStorage__queueServiceUri'
          value: storage.properties.primaryEndpoints.queue
        }
        {
          name: 'AzureWebJobsStorage__tableServiceUri'
          value: storage.properties.primaryEndpoints.table
        }
        // Service Bus triggers/bindings and the transport adapter (identity-based ServiceBusConnection).
        {
          name: 'ServiceBusConnection__fullyQualifiedNamespace'
          value: replace(replace(serviceBus.properties.serviceBusEndpoint, 'https://', ''), ':443/', '')
        }
        {
          name: 'ServiceBusConnection__credential'
          value: 'managedidentity'
        }
        {
          name: 'ServiceBusConnection__clientId'
          value: identityClientId
        }
        // DefaultAzureCredential / ManagedIdentityCredential in the code pick the user-assigned identity.
        {
          name: 'AZURE_CLIENT_ID'
          value: identityClientId
        }
        // Telemetry: the component has local auth disabled, so ingestion needs an Entra token.
        {
          name: 'APPLICATIONINSIGHTS_CONNECTION_STRING'
          value: appInsights.properties.ConnectionString
        }
        {
          name: 'APPLICATIONINSIGHTS_AUTHENTICATION_STRING'
          value: 'Authorization=AAD;ClientId=${identityClientId}'
        }
        // The worker owns telemetry: this makes it create its trace-context propagator and call
        // configure_azure_monitor itself at init, so the host's span continues in Python and the app does
        // not configure azure-monitor twice. Not PYTHON_ENABLE_OPENTELEMETRY: no propagator then, and every
        // invocation calls extract on None (worker issue 1881). Sources: docs/platform.md.
        {
          name: 'PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY'
          value: 'true'
        }
        // The worker attaches its exporter's handler to this logger only (its otel.py, initialize_azure_monitor;
        // unset = the root, which would also export every Azure SDK request and the exporter's own records).
        // Every app package's logger is a child of "sas" (workflow_core/__init__.py), so every record the app
        // writes reaches Application Insights; nothing outside it is exported by the worker.
        {
          name: 'PYTHON_APPLICATIONINSIGHTS_LOGGER_NAME'
          value: 'sas'
        }
        // The pattern's own settings.
        {
          name: 'AGENT_TRANSPORT'
          value: 'servicebus'
        }
        {
          name: 'LEDGER_TABLE_NAME'
          value: ledgerTableName
        }
        {
          name: 'DEADLINE_INDEX_TABLE_NAME'
          value: deadlineIndexTableName
        }
        {
          name: 'WORK_QUEUE_NAME'
          value: workQueueName
        }
        {
          name: 'HOSTED_POOLS'
          value: hostedPools
        }
        {
          name: 'ANSWER_QUEUES'
          value: answerQueues
        }
        // What sas doctor reads back from the management plane (api/diagnostics_rbac.py): the roles infra
        // granted the app and each pool identity on the namespace, the storage account and the component,
        // as Reader on each of the three.
        {
          name: 'SERVICE_BUS_NAMESPACE_ID'
          value: serviceBus.id
        }
        {
          name: 'STORAGE_ACCOUNT_ID'
          value: storage.id
        }
        {
          name: 'APPLICATION_INSIGHTS_ID'
          value: appInsights.id
        }
        {
          name: 'APP_PRINCIPAL_ID'
          value: identityPrincipalId
        }
        {
          name: 'AGENT_POOL_IDENTITIES'
          value: string(agentPoolIdentities)
        }
        {
          name: 'RESULT_QUEUE_NAME'
          value: resultQueueName
        }
        {
          name: 'DEAD_LETTER_QUEUE_NAME'
          value: deadLetterQueueName
        }
        {
          name: 'MAX_DELIVERY_COUNT'
          value: string(maxDeliveryCount)
        }
        {
          name: 'WATCHDOG_SCHEDULE'
          value: watchdogSchedule
        }
        {
          name: 'CANARY_SCHEDULE'
          value: canarySchedule
        }
        {
          name: 'CANARY_ENABLED'
          value: canaryEnabled ? 'true' : 'false'
        }
        {
          name: 'WATCHDOG_BATCH_SIZE'
          value: string(watchdogBatchSize)
        }
        {
          name: 'WATCHDOG_GRACE_SECONDS'
          value: string(watchdogGraceSeconds)
        }
        {
          name: 'WATCHDOG_RUN_ON_STARTUP'
          value: 'false'
        }
        {
          name: 'MAX_COMPENSATION_RESTARTS'
          value: string(maxCompensationRestarts)
        }
        {
          name: 'MAX_SCHEDULER_TERMINATIONS'
          value: string(maxSchedulerTerminations)
        }
        {
          name: 'LEDGER_TRANSACTION_CODEC'
          value: 'own'
        }
        {
          name: 'MAX_PAYLOAD_BYTES'
          value: string(maxPayloadBytes)
        }
        {
          name: 'PAYLOAD_CONTAINER_NAME'
          value: payloadContainerName
        }
        {
          name: 'TASK_HUB_NAME'
          value: taskHubName
        }
      ], useDurableTaskScheduler ? [
        // Durable Functions backend: the packaged host.json names it (storageProvider.type), because the
        // Functions host tells the scale controller which backend to scale on from host.json itself,
        // not from settings that override it (infra/deploy.sh and azd's package hook write the
        // Durable Task Scheduler variant). Only the connection is a setting, named by host.json's
        // connectionStringName. Identity-based: endpoint + the user-assigned identity, no key.
        {
          name: 'DURABLE_TASK_SCHEDULER_CONNECTION_STRING'
          value: 'Endpoint=${durableTaskSchedulerEndpoint};Authentication=ManagedIdentity;ClientID=${identityClientId}'
        }
      ] : [])
    }
    functionAppConfig: {
      deployment: {
        storage: {
          type: 'blobContainer'
          value: '${storage.properties.primaryEndpoints.blob}${deploymentContainerName}'
          authentication: {
            type: 'UserAssignedIdentity'
            userAssignedIdentityResourceId: identityId
          }
        }
      }
      scaleAndConcurrency: {
        maximumInstanceCount: maximumInstanceCount
        instanceMemoryMB: instanceMemoryMB
        // Scale groups of this app: http, durable, and one per other trigger function (agent_worker,
        // agent_result_handler, agent_dead_letter_handler, supervisor_watchdog). Only durable is kept warm:
        // an orchestration waiting on its control queue should not wait for a cold start.
        alwaysReady: [
          {
            name: 'durable'
            instanceCount: durableAlwaysReadyInstanceCount
          }
        ]
      }
      runtime: {
        name: 'python'
        version: '3.11'
      }
    }
  }
}

// No publishing with user name + password: deployments authenticate with Entra ID. `location` is required on
// these child resources (deployments without it fail with "The parameter location has an invalid value"); the
// AVM child module avm/res/web/site/basic-publishing-credentials-policy always sets it.
resource scmBasicAuth 'Microsoft.Web/sites/basicPublishingCredentialsPolicies@2024-04-01' = {
  parent: functionApp
  name: 'scm'
  location: location
  properties: {
    allow: false
  }
}

resource ftpBasicAuth 'Microsoft.Web/sites/basicPublishingCredentialsPolicies@2024-04-01' = {
  parent: functionApp
  name: 'ftp'
  location: location
  properties: {
    allow: false
  }
}

output id string = functionApp.id
output name string = functionApp.name
output defaultHostName string = functionApp.properties.defaultHostName
