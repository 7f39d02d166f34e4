// Optional: the agent pools with hosting 'containerApp' run the standalone runner (`sas-agent --pool <name>`)
// on Azure Container Apps, scaled by KEDA on their own work queue's backlog: zero replicas while it is empty,
// one more per `messagesPerReplica` active messages, up to the pool's maxReplicas. main.bicep calls this module
// only when a pool asks for it.
//
// No secret anywhere: each container app runs as its pool's user-assigned identity (created with its
// least-privilege roles by agent-pool.bicep), the runner's connections are the identity-based settings the
// Function App uses, and the scale rule authenticates with the same identity through its `identity` property
// instead of `auth` secrets. That form is documented in "Use managed identity for scale rules"
// (https://learn.microsoft.com/azure/container-apps/managed-identity#scale-rules) and in the REST reference of
// CustomScaleRule.identity ("the resource ID of a user-assigned managed identity that is assigned to the
// Container App"). KEDA's Service Bus scaler reads the queue's message count, which needs the Manage claim:
// hence Data Owner on the pool's queue (only) for these pools (agent-pool.bicep, scalesOnQueue).
// Logs go to Azure Monitor and from there to the Log Analytics workspace through a diagnostic setting: the
// 'log-analytics' destination would need the workspace's shared key.

@description('Name of the Container Apps managed environment.')
param environmentName string

@description('Suffix of each container app\'s name (ca-<pool>-<suffix>, at most 32 characters).')
@maxLength(8)
param appNameSuffix string

@description('Azure region.')
param location string

@description('Tags applied to every resource.')
param tags object = {}

@description('The containerApp pools: [{ name, queue, image, maxReplicas, ... }] (main.bicep fills the defaults).')
param pools array

@description('Name prefix of the pools\' identities (<prefix>-<pool>, created by agent-pool.bicep).')
param identityNamePrefix string

@description('Active messages per replica the KEDA Service Bus scaler aims for.')
@minValue(1)
param messagesPerReplica int = 5

@description('Registry server of a private image, pulled with the pool\'s identity (AcrPull granted by agent-pool-registry-pull.bicep when main.bicep\'s agentPoolRegistryId names the registry); empty = a public image.')
param registryServer string = ''

@description('Log Analytics workspace that receives the containers\' logs.')
param logAnalyticsWorkspaceId string

@description('Application Insights component the runners send telemetry to.')
param applicationInsightsName string

@description('Storage account of the ledger and the payload container.')
param storageAccountName string

@description('Service Bus namespace of the agent queues.')
param serviceBusNamespaceName string

// Settings read by workflow_core/settings.py, as the Function App gets them.
param ledgerTableName string
param deadlineIndexTableName string
param workQueueName string
param resultQueueName string
param maxDeliveryCount int
param maxPayloadBytes int
param payloadContainerName string

resource storage 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: storageAccountName
}

resource serviceBus 'Microsoft.ServiceBus/namespaces@2024-01-01' existing = {
  name: serviceBusNamespaceName
}

resource appInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: applicationInsightsName
}

resource poolIdentities 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' existing = [for pool in pools: {
  name: '${identityNamePrefix}-${pool.name}'
}]

var serviceBusNamespace = replace(replace(serviceBus.properties.serviceBusEndpoint, 'https://', ''), ':443/', '')

resource environment 'Microsoft.App/managedEnvironments@2024-03-01' = {
  name: environmentName
  location: location
  tags: tags
  properties: {
    appLogsConfiguration: {
      destination: 'azure-monitor'
    }
    // A workload profiles environment with its Consumption profile (the current environment type; without
    // workloadProfiles ARM creates the legacy Consumption-only one, which cannot take a dedicated profile later).
    workloadProfiles: [
      {
        name: 'Consumption'
        workloadProfileType: 'Consumption'
      }
    ]
  }
}

resource environmentDiagnostics 'Microsoft.Insights/diagnosticSettings@2021-05-01-preview' = {
  name: 'to-log-analytics'
  scope: environment
  properties: {
    workspaceId: logAnalyticsWorkspaceId
    logs: [
      {
        category: 'ContainerAppConsoleLogs'
        enabled: true
      }
      {
        category: 'ContainerAppSystemLogs'
        enabled: true
      }
    ]
  }
}

resource containerApps 'Microsoft.App/containerApps@2025-01-01' = [for (pool, i) in pools: {
  name: 'ca-${pool.name}-${appNameSuffix}'
  location: location
  tags: union(tags, {
    'agent-pool': pool.name
  })
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${poolIdentities[i].id}': {}
    }
  }
  properties: {
    managedEnvironmentId: environment.id
    workloadProfileName: 'Consumption'
    configuration: {
      // No ingress: the runner only pulls work from its queue. No secrets: see the header.
      activeRevisionsMode: 'Single'
      registries: empty(registryServer) ? [] : [
        {
          server: registryServer
          identity: poolIdentities[i].id
        }
      ]
    }
    template: {
      containers: [
        {
          name: 'sas-agent'
          image: pool.image
          command: [
            'sas-agent'
            '--pool'
            pool.name
          ]
          resources: {
            cpu: json('0.5')
            memory: '1Gi'
          }
          env: [
            {
              name: 'AzureWebJobsStorage__credential'
              value: 'managedidentity'
            }
            {
              name: 'AzureWebJobsStorage__clientId'
              value: poolIdentities[i].properties.clientId
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
            {
              name: 'ServiceBusConnection__fullyQualifiedNamespace'
              value: serviceBusNamespace
            }
            {
              name: 'ServiceBusConnection__credential'
              value: 'managedidentity'
            }
            {
              name: 'ServiceBusConnection__clientId'
              value: poolIdentities[i].properties.clientId
            }
            {
              name: 'AZURE_CLIENT_ID'
              value: poolIdentities[i].properties.clientId
            }
            {
              name: 'APPLICATIONINSIGHTS_CONNECTION_STRING'
              value: appInsights.properties.ConnectionString
            }
            {
              name: 'APPLICATIONINSIGHTS_AUTHENTICATION_STRING'
              value: 'Authorization=AAD;ClientId=${poolIdentities[i].properties.clientId}'
            }
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
              name: 'RESULT_QUEUE_NAME'
              value: resultQueueName
            }
            {
              name: 'MAX_DELIVERY_COUNT'
              value: string(maxDeliveryCount)
            }
            {
              name: 'MAX_PAYLOAD_BYTES'
              value: string(maxPayloadBytes)
            }
            {
              name: 'PAYLOAD_CONTAINER_NAME'
              value: payloadContainerName
            }
          ]
        }
      ]
      scale: {
        minReplicas: 0
        maxReplicas: pool.maxReplicas
        rules: [
          {
            name: 'work-backlog'
            custom: {
              type: 'azure-servicebus'
              identity: poolIdentities[i].id
              metadata: {
                namespace: serviceBus.name
                queueName: pool.queue
                messageCount: string(messagesPerReplica)
              }
            }
          }
        ]
      }
    }
  }
}]

output environmentId string = environment.id
output containerAppNames array = [for (pool, i) in pools: containerApps[i].name]
