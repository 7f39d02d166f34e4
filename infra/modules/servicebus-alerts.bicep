// Alert on result messages that Service Bus dead-lettered. Nothing in the app reads the results queue's
// dead-letter queue (the dead-letter handler reads the work queue's), so without this alert a lost result is
// only noticed when its step's deadline passes. A platform metric alert (not a log query): the namespace's
// DeadletteredMessages metric split by EntityName is not in the workspace (diagnostic settings export metrics
// without dimensions), and it needs no code to run. See docs/operations.md.

@description('Alert rule name.')
param name string

@description('Tags applied to the alert rule.')
param tags object = {}

@description('Service Bus namespace of the agent queues.')
param serviceBusNamespaceName string

@description('Queue agents send step results to (RESULT_QUEUE_NAME).')
param resultQueueName string

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

output id string = deadLetteredResultsAlert.id
