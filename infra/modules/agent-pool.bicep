// One agent pool served outside the Function App (hosting 'external' or 'containerApp'): its own user-assigned
// managed identity and the least-privilege roles its agents need, each on the narrowest scope Azure RBAC
// offers (a queue, a table, a blob container: never the namespace or the account). docs/deploy.md ("Agent
// pools") lists every assignment and why.
//
//   receive its own pool's work        Azure Service Bus Data Receiver on the pool's work queue (with its
//                                      dead-letter queue: RBAC cannot tell them apart); Data Owner instead
//                                      when KEDA scales on the queue (scalesOnQueue): its Service Bus scaler
//                                      reads the queue's message count, which needs the Manage claim
//   reply                              Azure Service Bus Data Sender on the result queue
//   read the app's answers (answerQueueNames, messageOnly pools that ask) Azure Service Bus Data Receiver
//                                      on each of the pool's answer queues (servicebus.bicep creates them)
//   claim, heartbeat, record (unless   Storage Table Data Contributor on the ledger table and on the deadline
//   messageOnly)                       index table (a deadline change moves the step's index row)
//   the example agents' idempotency   Storage Table Data Contributor on the RemoteEffects table
//   (unless messageOnly)               (activities/worker/handlers/remote.py; storage.bicep creates it)
//   large payloads (unless messageOnly) Storage Blob Data Contributor on the payload container
//   telemetry                          Monitoring Metrics Publisher on the Application Insights component
//
// A messageOnly pool holds no storage role at all: it reports liveness and results as messages and the app
// records them in the ledger on its behalf.

@description('Name of the pool\'s user-assigned managed identity.')
param identityName string

@description('Azure region.')
param location string

@description('Tags applied to the identity.')
param tags object = {}

@description('The pool\'s work queue (<WORK_QUEUE_NAME>-<pool>; WORK_QUEUE_NAME for the default pool).')
param poolQueueName string

@description('KEDA scales the pool on its queue\'s message count with this identity (Container Apps): Data Owner on the queue instead of Data Receiver.')
param scalesOnQueue bool = false

@description('The pool\'s agents speak messages only: no storage role.')
param messageOnly bool = false

@description('The pool\'s answer queues (<RESULT_QUEUE_NAME>-answers-...; servicebus.bicep creates them): its agents read the app\'s answers there.')
param answerQueueNames array = []

@description('Service Bus namespace of the agent queues.')
param serviceBusNamespaceName string

@description('Queue agents send step results to (RESULT_QUEUE_NAME).')
param resultQueueName string

@description('Storage account of the ledger and the payload container.')
param storageAccountName string

@description('Step ledger table (LEDGER_TABLE_NAME).')
param ledgerTableName string

@description('Deadline index table (DEADLINE_INDEX_TABLE_NAME).')
param deadlineIndexTableName string

@description('The example agents\' RemoteEffects table (created by storage.bicep).')
param remoteEffectsTableName string = 'RemoteEffects'

@description('Blob container of large payloads (PAYLOAD_CONTAINER_NAME).')
param payloadContainerName string

@description('Application Insights component the pool\'s runner sends telemetry to.')
param applicationInsightsName string

var roles = {
  serviceBusDataReceiver: '4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0'
  serviceBusDataOwner: '090c5cfd-751d-490a-894a-3ce6f1109419'
  serviceBusDataSender: '69a216fc-b8fb-44d8-bc22-1f3c2cd27a39'
  storageTableDataContributor: '0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3'
  storageBlobDataContributor: 'ba92f5b4-2d11-453d-a403-e96b0029c9fe'
  monitoringMetricsPublisher: '3913510d-42f4-4e42-8a64-420c390055eb'
}

resource poolIdentity 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = {
  name: identityName
  location: location
  tags: tags
}

resource serviceBus 'Microsoft.ServiceBus/namespaces@2024-01-01' existing = {
  name: serviceBusNamespaceName
}

resource poolQueue 'Microsoft.ServiceBus/namespaces/queues@2024-01-01' existing = {
  parent: serviceBus
  name: poolQueueName
}

resource answerQueues 'Microsoft.ServiceBus/namespaces/queues@2024-01-01' existing = [for queueName in answerQueueNames: {
  parent: serviceBus
  name: queueName
}]

resource resultQueue 'Microsoft.ServiceBus/namespaces/queues@2024-01-01' existing = {
  parent: serviceBus
  name: resultQueueName
}

resource storage 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: storageAccountName
}

resource tableService 'Microsoft.Storage/storageAccounts/tableServices@2023-05-01' existing = {
  parent: storage
  name: 'default'
}

resource ledgerTable 'Microsoft.Storage/storageAccounts/tableServices/tables@2023-05-01' existing = {
  parent: tableService
  name: ledgerTableName
}

resource deadlineIndexTable 'Microsoft.Storage/storageAccounts/tableServices/tables@2023-05-01' existing = {
  parent: tableService
  name: deadlineIndexTableName
}

resource remoteEffectsTable 'Microsoft.Storage/storageAccounts/tableServices/tables@2023-05-01' existing = {
  parent: tableService
  name: remoteEffectsTableName
}

resource blobService 'Microsoft.Storage/storageAccounts/blobServices@2023-05-01' existing = {
  parent: storage
  name: 'default'
}

resource payloadContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' existing = {
  parent: blobService
  name: payloadContainerName
}

resource appInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: applicationInsightsName
}

resource poolQueueReceiver 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!scalesOnQueue) {
  name: guid(poolQueue.id, poolIdentity.id, roles.serviceBusDataReceiver)
  scope: poolQueue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataReceiver)
    principalId: poolIdentity.properties.principalId
    principalType: 'ServicePrincipal'
  }
}

resource poolQueueScaler 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (scalesOnQueue) {
  name: guid(poolQueue.id, poolIdentity.id, roles.serviceBusDataOwner)
  scope: poolQueue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataOwner)
    principalId: poolIdentity.properties.principalId
    principalType: 'ServicePrincipal'
  }
}

resource answerQueueReceiver 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for (queueName, i) in answerQueueNames: {
  name: guid(answerQueues[i].id, poolIdentity.id, roles.serviceBusDataReceiver)
  scope: answerQueues[i]
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataReceiver)
    principalId: poolIdentity.properties.principalId
    principalType: 'ServicePrincipal'
  }
}]

resource resultQueueSender 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(resultQueue.id, poolIdentity.id, roles.serviceBusDataSender)
  scope: resultQueue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataSender)
    principalId: poolIdentity.properties.principalId
    principalType: 'ServicePrincipal'
  }
}

resource ledgerTableContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!messageOnly) {
  name: guid(ledgerTable.id, poolIdentity.id, roles.storageTableDataContributor)
  scope: ledgerTable
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageTableDataContributor)
    principalId: poolIdentity.properties.principalId
    principalType: 'ServicePrincipal'
  }
}

resource deadlineIndexTableContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!messageOnly) {
  name: guid(deadlineIndexTable.id, poolIdentity.id, roles.storageTableDataContributor)
  scope: deadlineIndexTable
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageTableDataContributor)
    principalId: poolIdentity.properties.principalId
    principalType: 'ServicePrincipal'
  }
}

resource remoteEffectsTableContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!messageOnly) {
  name: guid(remoteEffectsTable.id, poolIdentity.id, roles.storageTableDataContributor)
  scope: remoteEffectsTable
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageTableDataContributor)
    principalId: poolIdentity.properties.principalId
    principalType: 'ServicePrincipal'
  }
}

resource payloadContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!messageOnly) {
  name: guid(payloadContainer.id, poolIdentity.id, roles.storageBlobDataContributor)
  scope: payloadContainer
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageBlobDataContributor)
    principalId: poolIdentity.properties.principalId
    principalType: 'ServicePrincipal'
  }
}

resource telemetryPublisher 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(appInsights.id, poolIdentity.id, roles.monitoringMetricsPublisher)
  scope: appInsights
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.monitoringMetricsPublisher)
    principalId: poolIdentity.properties.principalId
    principalType: 'ServicePrincipal'
  }
}

output id string = poolIdentity.id
output clientId string = poolIdentity.properties.clientId
output principalId string = poolIdentity.properties.principalId
