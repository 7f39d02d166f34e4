// Alerts on messages Service Bus dead-lettered.
//
// Results: nothing in the app reads the results queue's dead-letter queue (the dead-letter handlers read the
// work queues'), so without this alert a lost result is only noticed when its step's deadline passes.
// Work, one alert per agent pool on its own queue: a pool whose runner keeps failing (or is gone while its
// messages expire) fills its own dead-letter queue, and the alert names the pool. A pool hosted by the app
// has its dead letters parked by the app's dead-letter handler, so its alert shows a burst; a pool served
// elsewhere keeps them until its runner or an operator drains them.
// Platform metric alerts (not log queries): the namespace's DeadletteredMessages metric split by EntityName is
// not in the workspace (diagnostic settings export metrics without dimensions), and they need no code to run.
// See docs/operations.md and docs/deploy.md ("Agent pools").

@description('Alert rule name (dead-lettered results).')
param name string

@description('Name prefix of the per-pool alert rules (<prefix>-<pool>).')
param poolAlertNamePrefix string

@description('Tags applied to the alert rules.')
param tags object = {}

@description('Service Bus namespace of the agent queues.')
param serviceBusNamespaceName string

@description('Queue agents send step results to (RESULT_QUEUE_NAME).')
param resultQueueName string

@description('Every agent pool: [{ name, queue, hosting }] (the default pool\'s queue is WORK_QUEUE_NAME).')
param pools array

@description('Action group to notify; empty = the alert fires without notifying anyone.')
param actionGroupId string = ''

resource serviceBus 'Microsoft.ServiceBus/namespaces@2024-01-01' existing = {
  name: serviceBusNamespaceName
}

resource deadLetteredResultsAlert 'Microsoft.Insights/metricAlerts@2018-03-01' = {
  name: name
  location: 'global'
  tags: tags
  properties: {
    description: 'Messages are waiting in the dead-letter queue of ${resultQueueName}: step results nobody will deliver. Their steps will time out; peek at them in Service Bus Explorer (docs/operations.md).'
    severity: 1
    enabled: true
    scopes: [
      serviceBus.id
    ]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT15M'
    autoMitigate: true
    criteria: {
      'odata.type': 'Microsoft.Azure.Monitor.SingleResourceMultipleMetricCriteria'
      allOf: [
        {
          name: 'dead-lettered-results'
          criterionType: 'StaticThresholdCriterion'
          metricNamespace: 'Microsoft.ServiceBus/namespaces'
          metricName: 'DeadletteredMessages'
          dimensions: [
            {
              name: 'EntityName'
              operator: 'Include'
              values: [
                resultQueueName
              ]
            }
          ]
          timeAggregation: 'Maximum'
          operator: 'GreaterThan'
          threshold: 0
        }
      ]
    }
    actions: empty(actionGroupId) ? [] : [
      {
        actionGroupId: actionGroupId
      }
    ]
  }
}

resource deadLetteredWorkAlerts 'Microsoft.Insights/metricAlerts@2018-03-01' = [for pool in pools: {
  name: '${poolAlertNamePrefix}-${pool.name}'
  location: 'global'
  tags: tags
  properties: {
    description: 'Work of agent pool ${pool.name} (hosting: ${pool.hosting}) is in the dead-letter queue of ${pool.queue}: deliveries its agents failed MAX_DELIVERY_COUNT times, or that expired unserved. Their steps time out and the watchdog retries them; find the cause in the pool\'s logs and the dead-letter reason (docs/operations.md).'
    severity: 2
    enabled: true
    scopes: [
      serviceBus.id
    ]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT15M'
    autoMitigate: true
    criteria: {
      'odata.type': 'Microsoft.Azure.Monitor.SingleResourceMultipleMetricCriteria'
      allOf: [
        {
          name: 'dead-lettered-work'
          criterionType: 'StaticThresholdCriterion'
          metricNamespace: 'Microsoft.ServiceBus/namespaces'
          metricName: 'DeadletteredMessages'
          dimensions: [
            {
              name: 'EntityName'
              operator: 'Include'
              values: [
                pool.queue
              ]
            }
          ]
          timeAggregation: 'Maximum'
          operator: 'GreaterThan'
          threshold: 0
        }
      ]
    }
    actions: empty(actionGroupId) ? [] : [
      {
        actionGroupId: actionGroupId
      }
    ]
  }
}]

output id string = deadLetteredResultsAlert.id
