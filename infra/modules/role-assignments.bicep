// Least-privilege data-plane roles, each scoped to the one resource it is needed on (never the resource group
// or subscription). Built-in role definition ids:
// https://learn.microsoft.com/azure/role-based-access-control/built-in-roles
//
// 1. The Function App's user-assigned identity (ServicePrincipal): what the host and the code need. Of the agent
//    pools' work queues it may receive only from those it hosts (HOSTED_POOLS); on the others it may only
//    send (it dispatches every pool's work). A pool served elsewhere has its own identity (agent-pool.bicep).
// 2. Optionally the deployer/operator (operatorPrincipalId, azd's AZURE_PRINCIPAL_ID): the ledger tables for the
//    operator CLI, the dead-letter queues for Service Bus Explorer (the azd quickstarts' principalId).

@description('Principal (object) id of the Function App\'s user-assigned managed identity.')
param principalId string

@description('Storage account behind AzureWebJobsStorage, the task hub, the ledger and the deployment package.')
param storageAccountName string

@description('Service Bus namespace of the agent queues.')
param serviceBusNamespaceName string

@description('Application Insights component the app sends telemetry to.')
param applicationInsightsName string

@description('Service Bus queue the scheduler sends step work to (WORK_QUEUE_NAME): the default pool\'s.')
param workQueueName string

@description('Whether the app hosts the default pool (receives from WORK_QUEUE_NAME); false = it only sends to it.')
param defaultPoolHosted bool = true

@description('Work queues of the other agent pools the app hosts.')
param hostedPoolQueueNames array = []

@description('Work queues of the other agent pools served elsewhere: the app only sends to them.')
param remotePoolQueueNames array = []

@description('Answer queues of the message-only pools that ask (<RESULT_QUEUE_NAME>-answers-...): the app sends its answers there and reads back only the probe of sas doctor.')
param answerQueueNames array = []

@description('Service Bus queue agents send step results to (RESULT_QUEUE_NAME).')
param resultQueueName string

@description('Step ledger table (LEDGER_TABLE_NAME).')
param ledgerTableName string

@description('Deadline index table (DEADLINE_INDEX_TABLE_NAME).')
param deadlineIndexTableName string

@description('Blob container of large payloads (PAYLOAD_CONTAINER_NAME).')
param payloadContainerName string

@description('Object id of the operator (user or group) who runs the operator CLI; empty = no operator roles.')
param operatorPrincipalId string = ''

@description('Principal type of operatorPrincipalId.')
@allowed([
  'User'
  'Group'
  'ServicePrincipal'
])
param operatorPrincipalType string = 'User'

var roles = {
  // Functions host: blob leases, timer/singleton locks, Durable task hub blobs, Flex deployment package.
  storageBlobDataOwner: 'b7e6dc6d-f1e8-4753-8033-0f276bb0955b'
  // The app's own code: read and write large payloads, on their container only. The host's Owner above
  // covers it today; this keeps the code's need explicit if the host's grant is ever narrowed.
  storageBlobDataContributor: 'ba92f5b4-2d11-453d-a403-e96b0029c9fe'
  // Durable task hub control/work-item queues and the storage-queue transport.
  storageQueueDataContributor: '974c5e8b-45b9-4653-ba55-5f855dd0fb88'
  // Durable history/instances tables, the step ledger and the deadline index.
  storageTableDataContributor: '0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3'
  // On each of the two queues (not the namespace): send, receive and settle their messages, and the Manage
  // claim the scale controller needs for target-based scaling of the Service Bus triggers (without it, it falls
  // back to a slower scaler). Trade-off: Manage on these two queues, nothing on any other entity.
  serviceBusDataOwner: '090c5cfd-751d-490a-894a-3ce6f1109419'
  // On the work queue of a pool served elsewhere: dispatch (and re-send) its work, never receive it; on each
  // answer queue: answer an agent's heartbeat.
  serviceBusDataSender: '69a216fc-b8fb-44d8-bc22-1f3c2cd27a39'
  // Operator: peek and receive the dead-letter queues (RBAC scopes stop at the queue, so this covers the live
  // queue too: read only $DeadLetterQueue).
  // The app, on each answer queue only: sas doctor reads its own probe answer back there (docs/deploy.md, Roles);
  // the narrowest built-in role that may receive (Listen, no Manage); any other answer it meets is abandoned.
  serviceBusDataReceiver: '4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0'
  // On the Service Bus namespace, the storage account and the Application Insights component: read the role
  // assignments there, so `sas doctor` can check the rights infra granted the app and each pool identity
  // (api/diagnostics_rbac.py). Control-plane reads only: Reader holds no data action and no listKeys.
  reader: 'acdd72a7-3385-48ef-bd42-f606fba81ae7'
  // Entra-authenticated telemetry ingestion (the component has local auth disabled).
  monitoringMetricsPublisher: '3913510d-42f4-4e42-8a64-420c390055eb'
}

resource storage 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: storageAccountName
}

resource serviceBus 'Microsoft.ServiceBus/namespaces@2024-01-01' existing = {
  name: serviceBusNamespaceName
}

resource appInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: applicationInsightsName
}

resource workQueue 'Microsoft.ServiceBus/namespaces/queues@2024-01-01' existing = {
  parent: serviceBus
  name: workQueueName
}

resource hostedPoolQueues 'Microsoft.ServiceBus/namespaces/queues@2024-01-01' existing = [for queueName in hostedPoolQueueNames: {
  parent: serviceBus
  name: queueName
}]

resource remotePoolQueues 'Microsoft.ServiceBus/namespaces/queues@2024-01-01' existing = [for queueName in remotePoolQueueNames: {
  parent: serviceBus
  name: queueName
}]

resource answerQueues 'Microsoft.ServiceBus/namespaces/queues@2024-01-01' existing = [for queueName in answerQueueNames: {
  parent: serviceBus
  name: queueName
}]

resource resultQueue 'Microsoft.ServiceBus/namespaces/queues@2024-01-01' existing = {
  parent: serviceBus
  name: resultQueueName
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

resource blobService 'Microsoft.Storage/storageAccounts/blobServices@2023-05-01' existing = {
  parent: storage
  name: 'default'
}

resource payloadContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' existing = {
  parent: blobService
  name: payloadContainerName
}

var hasOperator = !empty(operatorPrincipalId)

resource storageBlobDataOwner 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(storage.id, principalId, roles.storageBlobDataOwner)
  scope: storage
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageBlobDataOwner)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}

resource payloadBlobDataContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(payloadContainer.id, principalId, roles.storageBlobDataContributor)
  scope: payloadContainer
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageBlobDataContributor)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}

resource storageQueueDataContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(storage.id, principalId, roles.storageQueueDataContributor)
  scope: storage
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageQueueDataContributor)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}

resource storageTableDataContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(storage.id, principalId, roles.storageTableDataContributor)
  scope: storage
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageTableDataContributor)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}

resource workQueueDataOwner 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (defaultPoolHosted) {
  name: guid(workQueue.id, principalId, roles.serviceBusDataOwner)
  scope: workQueue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataOwner)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}

resource workQueueDataSender 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!defaultPoolHosted) {
  name: guid(workQueue.id, principalId, roles.serviceBusDataSender)
  scope: workQueue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataSender)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}

resource hostedPoolQueueDataOwner 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for (queueName, i) in hostedPoolQueueNames: {
  name: guid(hostedPoolQueues[i].id, principalId, roles.serviceBusDataOwner)
  scope: hostedPoolQueues[i]
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataOwner)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}]

resource remotePoolQueueDataSender 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for (queueName, i) in remotePoolQueueNames: {
  name: guid(remotePoolQueues[i].id, principalId, roles.serviceBusDataSender)
  scope: remotePoolQueues[i]
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataSender)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}]

resource answerQueueDataSender 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for (queueName, i) in answerQueueNames: {
  name: guid(answerQueues[i].id, principalId, roles.serviceBusDataSender)
  scope: answerQueues[i]
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataSender)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}]

resource answerQueueDataReceiver 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for (queueName, i) in answerQueueNames: {
  name: guid(answerQueues[i].id, principalId, roles.serviceBusDataReceiver)
  scope: answerQueues[i]
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataReceiver)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}]

resource resultQueueDataOwner 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(resultQueue.id, principalId, roles.serviceBusDataOwner)
  scope: resultQueue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataOwner)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}

resource namespaceReader 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(serviceBus.id, principalId, roles.reader)
  scope: serviceBus
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.reader)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}

resource storageReader 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(storage.id, principalId, roles.reader)
  scope: storage
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.reader)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}

resource appInsightsReader 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(appInsights.id, principalId, roles.reader)
  scope: appInsights
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.reader)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}

resource monitoringMetricsPublisher 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(appInsights.id, principalId, roles.monitoringMetricsPublisher)
  scope: appInsights
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.monitoringMetricsPublisher)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}

// ----- The operator (deployer) -----

resource operatorLedgerTable 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (hasOperator) {
  name: guid(ledgerTable.id, operatorPrincipalId, roles.storageTableDataContributor)
  scope: ledgerTable
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageTableDataContributor)
    principalId: operatorPrincipalId
    principalType: operatorPrincipalType
  }
}

resource operatorDeadlineIndexTable 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (hasOperator) {
  name: guid(deadlineIndexTable.id, operatorPrincipalId, roles.storageTableDataContributor)
  scope: deadlineIndexTable
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageTableDataContributor)
    principalId: operatorPrincipalId
    principalType: operatorPrincipalType
  }
}

resource operatorWorkDeadLetters 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (hasOperator) {
  name: guid(workQueue.id, operatorPrincipalId, roles.serviceBusDataReceiver)
  scope: workQueue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataReceiver)
    principalId: operatorPrincipalId
    principalType: operatorPrincipalType
  }
}

resource operatorResultDeadLetters 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (hasOperator) {
  name: guid(resultQueue.id, operatorPrincipalId, roles.serviceBusDataReceiver)
  scope: resultQueue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataReceiver)
    principalId: operatorPrincipalId
    principalType: operatorPrincipalType
  }
}

// The dead-letter queues of the other pools' work queues (no operator: loops over nothing).
resource operatorHostedPoolDeadLetters 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for (queueName, i) in (hasOperator ? hostedPoolQueueNames : []): {
  name: guid(hostedPoolQueues[i].id, operatorPrincipalId, roles.serviceBusDataReceiver)
  scope: hostedPoolQueues[i]
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataReceiver)
    principalId: operatorPrincipalId
    principalType: operatorPrincipalType
  }
}]

resource operatorRemotePoolDeadLetters 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for (queueName, i) in (hasOperator ? remotePoolQueueNames : []): {
  name: guid(remotePoolQueues[i].id, operatorPrincipalId, roles.serviceBusDataReceiver)
  scope: remotePoolQueues[i]
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataReceiver)
    principalId: operatorPrincipalId
    principalType: operatorPrincipalType
  }
}]
