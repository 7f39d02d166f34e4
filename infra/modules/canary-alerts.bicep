// Alerts on the recovery canary (docs/operations.md, "Recovery canary").
//
// The canary timer judges each run of the built-in sas-canary workflow from the ledger's audit trail and
// counts it in the counter sas.canary.runs (dimension outcome: passed | failed; also scenario, pool).
// -> customMetrics (valueSum = count in the export interval). Each tick also counts every canary pool
// with no pass within two periods in sas.canary.stale_pools (dimension pool). Three alerts:
//   canaryFailedAlert  any failed verdict: a recovery path (watchdog, retry, compensation, resume, a pool's
//                      agent) did not work when exercised on purpose.
//   canaryStaleAlert   no passed verdict for two canary periods: the canary itself is not running (timer
//                      disabled, CANARY_ENABLED off, the app down) or every run fails.
//   canaryPoolStaleAlert one pool has had no pass for two periods while others pass (its runs never
//                      start or are never judged), one alert per pool.

@description('Application Insights component the app exports its metrics to.')
param applicationInsightsName string

@description('Location of the log alert rules.')
param location string

@description('Tags applied to the alert rules.')
param tags object = {}

@description('Action group to notify; empty = the alert fires without notifying anyone.')
param actionGroupId string = ''

@description('The canary period in hours (CANARY_SCHEDULE): the stale alert fires after two periods without a pass.')
@minValue(1)
@maxValue(12)
param canaryPeriodHours int = 1

@description('CANARY_ENABLED: with the canary off no verdict is ever emitted, so the alerts are deployed disabled.')
param enabled bool = true

resource appInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: applicationInsightsName
}

var canaryFailedQuery = '''
customMetrics
| where name == "sas.canary.runs"
| extend outcome = tostring(customDimensions["outcome"]), scenario = tostring(customDimensions["scenario"]), pool = tostring(customDimensions["pool"])
| where outcome == "failed"
| project timestamp, occurrences = todouble(valueSum), scenario, pool
| where occurrences > 0
'''

var canaryPassedQuery = '''
customMetrics
| where name == "sas.canary.runs"
| extend outcome = tostring(customDimensions["outcome"])
| where outcome == "passed"
| summarize occurrences = sum(todouble(valueSum))
'''

var canaryPoolStaleQuery = '''
customMetrics
| where name == "sas.canary.stale_pools"
| extend pool = tostring(customDimensions["pool"])
| summarize occurrences = sum(todouble(valueSum)) by pool
'''

resource canaryFailedAlert 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = {
  name: 'alert-${applicationInsightsName}-canary-failed'
  location: location
  tags: tags
  kind: 'LogAlert'
  properties: {
    displayName: 'Scheduler Agent Supervisor: the recovery canary failed'
    description: 'A sas-canary run did not recover as expected (sas.canary.runs, outcome failed). Its verdict names the scenario, the pool and the cause: run `sas canary` and see docs/operations.md, "Recovery canary".'
    severity: 1
    enabled: enabled
    scopes: [
      appInsights.id
    ]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT15M'
    autoMitigate: true
    criteria: {
      allOf: [
        {
          query: canaryFailedQuery
          timeAggregation: 'Total'
          metricMeasureColumn: 'occurrences'
          operator: 'GreaterThan'
          threshold: 0
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    actions: {
      actionGroups: empty(actionGroupId) ? [] : [
        actionGroupId
      ]
    }
  }
}

resource canaryStaleAlert 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = {
  name: 'alert-${applicationInsightsName}-canary-stale'
  location: location
  tags: tags
  kind: 'LogAlert'
  properties: {
    displayName: 'Scheduler Agent Supervisor: no recovery canary passed for two periods'
    description: 'No sas-canary run passed (sas.canary.runs, outcome passed) for two canary periods: the canary timer is not running (CANARY_ENABLED, CANARY_SCHEDULE, the app) or every run fails. See docs/operations.md, "Recovery canary".'
    severity: 2
    enabled: enabled
    scopes: [
      appInsights.id
    ]
    evaluationFrequency: 'PT1H'
    windowSize: 'PT${2 * canaryPeriodHours}H'
    autoMitigate: true
    criteria: {
      allOf: [
        {
          query: canaryPassedQuery
          timeAggregation: 'Total'
          metricMeasureColumn: 'occurrences'
          operator: 'LessThan'
          threshold: 1
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    actions: {
      actionGroups: empty(actionGroupId) ? [] : [
        actionGroupId
      ]
    }
  }
}

resource canaryPoolStaleAlert 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = {
  name: 'alert-${applicationInsightsName}-canary-pool-stale'
  location: location
  tags: tags
  kind: 'LogAlert'
  properties: {
    displayName: 'Scheduler Agent Supervisor: a canary pool has not passed for two periods'
    description: 'The canary tick counted a pool with no passed sas-canary run for two periods (sas.canary.stale_pools, dimension pool): its runs do not start or are not judged while other pools pass. Run `sas canary` and see docs/operations.md, "Recovery canary".'
    severity: 2
    enabled: enabled
    scopes: [
      appInsights.id
    ]
    evaluationFrequency: 'PT15M'
    windowSize: 'PT${canaryPeriodHours}H'
    autoMitigate: true
    criteria: {
      allOf: [
        {
          query: canaryPoolStaleQuery
          timeAggregation: 'Total'
          metricMeasureColumn: 'occurrences'
          dimensions: [
            {
              name: 'pool'
              operator: 'Include'
              values: [
                '*'
              ]
            }
          ]
          operator: 'GreaterThan'
          threshold: 0
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    actions: {
      actionGroups: empty(actionGroupId) ? [] : [
        actionGroupId
      ]
    }
  }
}
