// Service Bus namespace and the agent queues: the work queue (the default pool's), one work queue per other
// agent pool (same settings: docs/transport.md says why a queue per pool), and the results queue. Local (SAS key) auth is disabled: senders and receivers
// authenticate with Entra ID. Both queues dedupe on MessageId, which the scheduler derives from
// (instance, step, attempt), so a re-sent dispatch inside the window is dropped by the broker as well as
// by the ledger. Note: requiresDuplicateDetection cannot be changed on an existing queue.

@description('Globally unique namespace name (6-50 characters).')
@minLength(6)
@maxLength(50)
param name string

@description('Azure region.')
param location string

@description('Tags applied to the namespace.')
param tags object = {}

@description('Queue the scheduler sends step work to (WORK_QUEUE_NAME).')
param workQueueName string

@description('Work queues of the agent pools other than the default one (<WORK_QUEUE_NAME>-<pool>).')
param poolQueueNames array = []

@description('Answer queues of the message-only pools that ask before an effect (<RESULT_QUEUE_NAME>-answers-...).')
param answerQueueNames array = []

@description('Queue agents send step results to (RESULT_QUEUE_NAME).')
param resultQueueName string

@description('Deliveries of one message before Service Bus dead-letters it (MAX_DELIVERY_COUNT).')
@minValue(1)
param maxDeliveryCount int

@description('Peek-lock duration (ISO 8601, at most PT5M). The Functions host renews the lock of a message being handled (host.json maxAutoLockRenewalDuration) but not of a prefetched one, so host.json sets prefetchCount 0.')
param lockDuration string = 'PT5M'

@description('Duplicate detection window (ISO 8601, 20 seconds to 7 days).')
param duplicateDetectionWindow string = 'PT10M'

@description('Time to live of an unconsumed message (ISO 8601); expired messages are dead-lettered.')
param messageTimeToLive string = 'P14D'

@description('Log Analytics workspace that receives the namespace\'s resource logs.')
param logAnalyticsWorkspaceId string

resource namespace 'Microsoft.ServiceBus/namespaces@2024-01-01' = {
  name: name
  location: location
  tags: tags
  sku: {
    name: 'Standard'
    tier: 'Standard'
  }
  properties: {
    disableLocalAuth: true
    minimumTlsVersion: '1.2'
    publicNetworkAccess: 'Enabled'
  }
}

resource workQueue 'Microsoft.ServiceBus/namespaces/queues@2024-01-01' = {
  parent: namespace
  name: workQueueName
  properties: {
    lockDuration: lockDuration
    maxDeliveryCount: maxDeliveryCount
    requiresDuplicateDetection: true
    duplicateDetectionHistoryTimeWindow: duplicateDetectionWindow
    defaultMessageTimeToLive: messageTimeToLive
    deadLetteringOnMessageExpiration: true
    requiresSession: false
    enablePartitioning: false
    enableBatchedOperations: true
    maxSizeInMegabytes: 1024
  }
}

// Exactly the work queue's settings: a pool's work is the same work, routed apart.
resource poolQueues 'Microsoft.ServiceBus/namespaces/queues@2024-01-01' = [for queueName in poolQueueNames: {
  parent: namespace
  name: queueName
  properties: {
    lockDuration: lockDuration
    maxDeliveryCount: maxDeliveryCount
    requiresDuplicateDetection: true
    duplicateDetectionHistoryTimeWindow: duplicateDetectionWindow
    defaultMessageTimeToLive: messageTimeToLive
    deadLetteringOnMessageExpiration: true
    requiresSession: false
    enablePartitioning: false
    enableBatchedOperations: true
    maxSizeInMegabytes: 1024
  }
}]

// The app's answers to an agent's "is my attempt still current?" (activities/replies/attempt_status.py): read
// and deleted by that agent alone, worthless once its question timed out, so they expire within minutes and
// are dropped, not dead-lettered; no duplicate detection (each answer is new).
resource answerQueues 'Microsoft.ServiceBus/namespaces/queues@2024-01-01' = [for queueName in answerQueueNames: {
  parent: namespace
  name: queueName
  properties: {
    lockDuration: lockDuration
    maxDeliveryCount: maxDeliveryCount
    requiresDuplicateDetection: false
    defaultMessageTimeToLive: 'PT10M'
    deadLetteringOnMessageExpiration: false
    requiresSession: false
    enablePartitioning: false
    enableBatchedOperations: true
    maxSizeInMegabytes: 1024
  }
}]

resource resultQueue 'Microsoft.ServiceBus/namespaces/queues@2024-01-01' = {
  parent: namespace
  name: resultQueueName
  properties: {
    lockDuration: lockDuration
    maxDeliveryCount: maxDeliveryCount
    requiresDuplicateDetection: true
    duplicateDetectionHistoryTimeWindow: duplicateDetectionWindow
    defaultMessageTimeToLive: messageTimeToLive
    deadLetteringOnMessageExpiration: true
    requiresSession: false
    enablePartitioning: false
    enableBatchedOperations: true
    maxSizeInMegabytes: 1024
  }
}

resource diagnostics 'Microsoft.Insights/diagnosticSettings@2021-05-01-preview' = {
  name: 'to-log-analytics'
  scope: namespace
  properties: {
    workspaceId: logAnalyticsWorkspaceId
    logs: [
      {
        categoryGroup: 'allLogs'
        enabled: true
      }
    ]
    metrics: [
      {
        category: 'AllMetrics'
        enabled: true
      }
    ]
  }
}

output id string = namespace.id
output name string = namespace.name
// serviceBusEndpoint is 'https://<name>.servicebus.windows.net:443/' (other suffixes in sovereign clouds).
output fullyQualifiedNamespace string = replace(replace(namespace.properties.serviceBusEndpoint, 'https://', ''), ':443/', '')
