// Storage account behind AzureWebJobsStorage: the Functions host (leases, timers), the Durable Functions
// task hub, the Flex Consumption deployment package, the step ledger tables, the storage-queue
// transport queues and the large-payload container with its lifecycle rule. Key-based access is off: everything authenticates with Entra ID (managed identity).

@description('Globally unique storage account name (3-24 lowercase letters and digits).')
@minLength(3)
@maxLength(24)
param name string

@description('Azure region.')
param location string

@description('Tags applied to the account.')
param tags object = {}

@description('Replication SKU. Standard_ZRS (or GZRS) for production, Standard_LRS for throwaway dev environments.')
@allowed([
  'Standard_LRS'
  'Standard_ZRS'
  'Standard_GRS'
  'Standard_GZRS'
])
param skuName string = 'Standard_LRS'

@description('Blob container holding the Flex Consumption deployment package.')
param deploymentContainerName string

@description('Step ledger table (LEDGER_TABLE_NAME).')
param ledgerTableName string

@description('Deadline index table (DEADLINE_INDEX_TABLE_NAME).')
param deadlineIndexTableName string

@description('The example agents\' RemoteEffects table (activities/worker/handlers/remote.py).')
param remoteEffectsTableName string = 'RemoteEffects'

@description('Work queue of the storage-queue transport (WORK_QUEUE_NAME).')
param workQueueName string

@description('Result queue of the storage-queue transport (RESULT_QUEUE_NAME).')
param resultQueueName string

@description('Poison queue of the storage-queue transport (DEAD_LETTER_QUEUE_NAME).')
param deadLetterQueueName string

@description('Blob container of payloads too large for a ledger property (PAYLOAD_CONTAINER_NAME).')
param payloadContainerName string

@description('Days after its last write that a payload blob is deleted by the lifecycle rule.')
@minValue(1)
param payloadRetentionDays int

@description('Log Analytics workspace that receives the storage services\' resource logs.')
param logAnalyticsWorkspaceId string

resource storage 'Microsoft.Storage/storageAccounts@2023-05-01' = {
  name: name
  location: location
  tags: tags
  kind: 'StorageV2'
  sku: {
    name: skuName
  }
  properties: {
    // checkov:skip=CKV_AZURE_35: Flex Consumption without VNet integration reaches storage over its public endpoint; access is Entra-only (shared keys disabled) and scoped by RBAC. Add VNet integration + private endpoints to close the network path.
    // checkov:skip=CKV_AZURE_59: Same reason as CKV_AZURE_35: the app has no VNet integration, so the public endpoint stays enabled.
    // checkov:skip=CKV_AZURE_206: Replication is a parameter (Standard_ZRS in main.prod.bicepparam); dev uses LRS on purpose.
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

resource blobService 'Microsoft.Storage/storageAccounts/blobServices@2023-05-01' = {
  parent: storage
  name: 'default'
  properties: {
    deleteRetentionPolicy: {
      enabled: true
      days: 7
    }
    containerDeleteRetentionPolicy: {
      enabled: true
      days: 7
    }
  }
}

resource deploymentContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' = {
  parent: blobService
  name: deploymentContainerName
  properties: {
    publicAccess: 'None'
  }
}

// Workflow inputs, step inputs and outputs larger than a ledger property, stored once by content digest
// (workflow_core/payloads.py); the ledger rows and messages carry references to them.
resource payloadContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' = {
  parent: blobService
  name: payloadContainerName
  properties: {
    publicAccess: 'None'
  }
}

// Payloads are never deleted by the app: this rule deletes each blob payloadRetentionDays after its last
// write (a repeated write of the same content moves Last-Modified to then), so a reference outlives the
// instance that wrote it by the retention period.
resource lifecycle 'Microsoft.Storage/storageAccounts/managementPolicies@2023-05-01' = {
  parent: storage
  name: 'default'
  properties: {
    policy: {
      rules: [
        {
          name: 'delete-old-payloads'
          enabled: true
          type: 'Lifecycle'
          definition: {
            filters: {
              blobTypes: [
                'blockBlob'
              ]
              prefixMatch: [
                '${payloadContainerName}/'
              ]
            }
            actions: {
              baseBlob: {
                delete: {
                  daysAfterModificationGreaterThan: payloadRetentionDays
                }
              }
            }
          }
        }
      ]
    }
  }
}

resource queueService 'Microsoft.Storage/storageAccounts/queueServices@2023-05-01' = {
  parent: storage
  name: 'default'
}

resource workQueue 'Microsoft.Storage/storageAccounts/queueServices/queues@2023-05-01' = {
  parent: queueService
  name: workQueueName
}

resource resultQueue 'Microsoft.Storage/storageAccounts/queueServices/queues@2023-05-01' = {
  parent: queueService
  name: resultQueueName
}

resource deadLetterQueue 'Microsoft.Storage/storageAccounts/queueServices/queues@2023-05-01' = {
  parent: queueService
  name: deadLetterQueueName
}

resource tableService 'Microsoft.Storage/storageAccounts/tableServices@2023-05-01' = {
  parent: storage
  name: 'default'
}

resource ledgerTable 'Microsoft.Storage/storageAccounts/tableServices/tables@2023-05-01' = {
  parent: tableService
  name: ledgerTableName
}

resource deadlineIndexTable 'Microsoft.Storage/storageAccounts/tableServices/tables@2023-05-01' = {
  parent: tableService
  name: deadlineIndexTableName
}

// The example agents' idempotency table (activities/worker/handlers/remote.py, REMOTE_EFFECTS_TABLE): created
// here so that a pool identity, which holds a role on this table only, never needs the right to create tables.
resource remoteEffectsTable 'Microsoft.Storage/storageAccounts/tableServices/tables@2023-05-01' = {
  parent: tableService
  name: remoteEffectsTableName
}

// The data-service logs, by category, not by a category group whose members the platform may change:
// writes and deletes (who changed the ledger, the task hub, the deployment package). Not StorageRead:
// it logs every Durable Functions queue poll and table read, thousands of entries a minute from an
// idle app (the workspace also has a daily cap).
var storageLogCategories = [
  {
    category: 'StorageWrite'
    enabled: true
  }
  {
    category: 'StorageDelete'
    enabled: true
  }
]

resource blobDiagnostics 'Microsoft.Insights/diagnosticSettings@2021-05-01-preview' = {
  name: 'to-log-analytics'
  scope: blobService
  properties: {
    workspaceId: logAnalyticsWorkspaceId
    logs: storageLogCategories
  }
}

resource queueDiagnostics 'Microsoft.Insights/diagnosticSettings@2021-05-01-preview' = {
  name: 'to-log-analytics'
  scope: queueService
  properties: {
    workspaceId: logAnalyticsWorkspaceId
    logs: storageLogCategories
  }
}

resource tableDiagnostics 'Microsoft.Insights/diagnosticSettings@2021-05-01-preview' = {
  name: 'to-log-analytics'
  scope: tableService
  properties: {
    workspaceId: logAnalyticsWorkspaceId
    logs: storageLogCategories
  }
}

output id string = storage.id
output name string = storage.name
output blobEndpoint string = storage.properties.primaryEndpoints.blob
output queueEndpoint string = storage.properties.primaryEndpoints.queue
output tableEndpoint string = storage.properties.primaryEndpoints.table
output payloadContainerName string = payloadContainer.name
output deploymentContainerUrl string = '${storage.properties.primaryEndpoints.blob}${deploymentContainer.name}'
