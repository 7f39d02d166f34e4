// Log Analytics + workspace-based Application Insights (local auth disabled: telemetry is ingested with
// Entra ID tokens of the app's managed identity), the operator views (saved searches + a workbook) and
// the alerts on the supervisor's recovery telemetry.
//
// Telemetry contract (workflow_core/telemetry.py, exported by the Azure Monitor OpenTelemetry distro; the full
// list of instruments is in docs/operations.md):
//   counter sas.recoveries           +1 per recovery action; dimensions action (resend, fail_step,
//                                    start_compensation, fail_compensation, finish_compensation,
//                                    note_overrun, ...), outcome (ok | error | compensation_failed),
//                                    workflow. -> customMetrics (valueSum = count in the export interval)
//   counter sas.compensation_failures +1 per compensation that gave up; dimension workflow. -> customMetrics
//   custom event sas.recovery        one per recovery action (a log record carrying
//                                    microsoft.custom_event.name), with instance_id, step_id, attempt, action,
//                                    outcome, workflow (+ reason, error) -> customEvents.customDimensions
//   custom event sas.instance_stalled  the watchdog found an instance whose scheduler missed its deadline;
//                                    workflow, instance_id, action -> customEvents
// Alerts count metrics (not sampled) or custom events (itemCount undoes sampling); the workbook reads the events.

@description('Log Analytics workspace name.')
param logAnalyticsName string

@description('Application Insights component name.')
param applicationInsightsName string

@description('Azure region.')
param location string

@description('Tags applied to the resources.')
param tags object = {}

@description('Days Log Analytics keeps data.')
@minValue(30)
@maxValue(730)
param retentionInDays int = 30

@description('Daily ingestion cap of the workspace in GB (-1 = none). Data over the cap is dropped until the next day.')
@minValue(-1)
param dailyQuotaGb int = 1

@description('Alert when more recoveries than this happen within 15 minutes.')
@minValue(1)
param recoveryAlertThreshold int = 20

@description('E-mail address notified by the alerts; empty = alerts fire without notifying anyone.')
param alertEmail string = ''

resource workspace 'Microsoft.OperationalInsights/workspaces@2023-09-01' = {
  name: logAnalyticsName
  location: location
  tags: tags
  properties: {
    sku: {
      name: 'PerGB2018'
    }
    retentionInDays: retentionInDays
    workspaceCapping: {
      dailyQuotaGb: dailyQuotaGb
    }
    features: {
      disableLocalAuth: true
    }
  }
}

resource appInsights 'Microsoft.Insights/components@2020-02-02' = {
  name: applicationInsightsName
  location: location
  tags: tags
  kind: 'web'
  properties: {
    Application_Type: 'web'
    WorkspaceResourceId: workspace.id
    IngestionMode: 'LogAnalytics'
    DisableLocalAuth: true
  }
}

// ---------------------------------------------------------------------------------------------------------
// Queries. Application Insights scope: customMetrics / customEvents (timestamp, name, customDimensions).
// ---------------------------------------------------------------------------------------------------------

// Recovery actions, per metric record. note_* actions are observations (a step overran but its own
// orchestration timer handles it), not recoveries, so they do not count towards the surge alert.
var recoveriesQuery = '''
customMetrics
| where name == "sas.recoveries"
| extend action = tostring(customDimensions["action"]), outcome = tostring(customDimensions["outcome"])
| where not(action startswith "note_")
| project timestamp, occurrences = todouble(valueSum), action, outcome
| where occurrences > 0
'''

// Both counters move for one failed compensation; the alert fires on any occurrence, so the overlap
// does not matter.
var compensationFailuresQuery = '''
customMetrics
| extend outcome = tostring(customDimensions["outcome"]), workflow = tostring(customDimensions["workflow"])
| where name == "sas.compensation_failures" or (name == "sas.recoveries" and outcome == "compensation_failed")
| project timestamp, occurrences = todouble(valueSum), name, workflow
| where occurrences > 0
'''

// Workbook queries ({TimeRange} is the workbook's time picker).
var recoveriesOverTimeQuery = '''
customMetrics
| where timestamp {TimeRange}
| where name == "sas.recoveries"
| extend action = tostring(customDimensions["action"])
| summarize recoveries = sum(valueSum) by action, bin(timestamp, 5m)
| render timechart
'''

// The watchdog found an instance whose scheduler missed its deadline (custom event sas.instance_stalled, sent by
// the watchdog with workflow, instance_id and action). itemCount undoes ingestion sampling.
var stalledInstancesQuery = '''
customEvents
| where name == "sas.instance_stalled"
| extend workflow = tostring(customDimensions["workflow"]), instance = tostring(customDimensions["instance_id"]),
    action = tostring(customDimensions["action"])
| project timestamp, occurrences = todouble(itemCount), workflow, instance, action
'''

var stalledStepsQuery = '''
// Steps the watchdog found overdue or failed, and what it did about them (newest first).
customEvents
| where timestamp {TimeRange}
| where name == "sas.recovery" and isnotempty(customDimensions["step_id"])
| extend action = tostring(customDimensions["action"]), outcome = tostring(customDimensions["outcome"]),
    workflow = tostring(customDimensions["workflow"]), instance = tostring(customDimensions["instance_id"]),
    step = tostring(customDimensions["step_id"])
| summarize arg_max(timestamp, action, outcome), actions = count(), kinds = make_set(action),
    firstSeen = min(timestamp) by workflow, instance, step
| project workflow, instance, step, actions, kinds, lastAction = action, lastOutcome = outcome, firstSeen,
    lastSeen = timestamp
| order by lastSeen desc
'''

var stalledInstancesTableQuery = '''
customEvents
| where timestamp {TimeRange}
| where name == "sas.instance_stalled"
| extend workflow = tostring(customDimensions["workflow"]), instance = tostring(customDimensions["instance_id"]),
    action = tostring(customDimensions["action"])
| summarize arg_max(timestamp, action), times = count() by workflow, instance
| project workflow, instance, times, lastAction = action, lastSeen = timestamp
| order by lastSeen desc
'''

var compensationOutcomesQuery = '''
customEvents
| where timestamp {TimeRange}
| where name == "sas.recovery"
| extend action = tostring(customDimensions["action"]), outcome = tostring(customDimensions["outcome"])
| where action has "compensation" or outcome == "compensation_failed"
| project timestamp, workflow = tostring(customDimensions["workflow"]),
    instance = tostring(customDimensions["instance_id"]), step = tostring(customDimensions["step_id"]),
    action, outcome, reason = tostring(customDimensions["reason"]), error = tostring(customDimensions["error"])
| order by timestamp desc
'''

// Same views for the Log Analytics workspace (workspace tables AppMetrics / AppEvents).
var workspaceRecoveriesQuery = '''
AppMetrics
| where Name == "sas.recoveries"
| extend action = tostring(Properties["action"]), outcome = tostring(Properties["outcome"])
| summarize recoveries = sum(Sum) by action, outcome, bin(TimeGenerated, 15m)
| order by TimeGenerated desc
'''

var workspaceStalledStepsQuery = '''
AppEvents
| where Name == "sas.recovery" and isnotempty(Properties["step_id"])
| extend action = tostring(Properties["action"]), outcome = tostring(Properties["outcome"]),
    workflow = tostring(Properties["workflow"]), instance = tostring(Properties["instance_id"]),
    step = tostring(Properties["step_id"])
| summarize actions = count(), kinds = make_set(action), lastSeen = max(TimeGenerated) by workflow, instance, step
| order by lastSeen desc
'''

var workspaceCompensationFailuresQuery = '''
AppEvents
| where Name == "sas.recovery" and tostring(Properties["outcome"]) == "compensation_failed"
| project TimeGenerated, workflow = tostring(Properties["workflow"]), instance = tostring(Properties["instance_id"]),
    step = tostring(Properties["step_id"]), action = tostring(Properties["action"]), error = tostring(Properties["error"])
| order by TimeGenerated desc
'''

resource recoveriesSearch 'Microsoft.OperationalInsights/workspaces/savedSearches@2020-08-01' = {
  parent: workspace
  name: 'sas-recoveries-by-action'
  properties: {
    category: 'Scheduler Agent Supervisor'
    displayName: 'Recoveries by action (15 min buckets)'
    query: workspaceRecoveriesQuery
  }
}

resource stalledStepsSearch 'Microsoft.OperationalInsights/workspaces/savedSearches@2020-08-01' = {
  parent: workspace
  name: 'sas-stalled-steps'
  properties: {
    category: 'Scheduler Agent Supervisor'
    displayName: 'Stalled steps: overdue or failed steps the watchdog acted on'
    query: workspaceStalledStepsQuery
  }
}

resource compensationFailuresSearch 'Microsoft.OperationalInsights/workspaces/savedSearches@2020-08-01' = {
  parent: workspace
  name: 'sas-compensation-failures'
  properties: {
    category: 'Scheduler Agent Supervisor'
    displayName: 'Compensations that failed (need an operator)'
    query: workspaceCompensationFailuresQuery
  }
}

var workbookContent = {
  version: 'Notebook/1.0'
  items: [
    {
      type: 1
      name: 'intro'
      content: {
        json: '## Scheduler Agent Supervisor\nRecoveries the supervisor performed (re-send, fail a timed-out step, start or fail a compensation) and whether compensation worked. The step ledger itself lives in Table Storage (`StepLedger`).'
      }
    }
    {
      type: 9
      name: 'parameters'
      content: {
        version: 'KqlParameterItem/1.0'
        parameters: [
          {
            id: 'b0f4a7de-7c2e-4d0e-9f1a-3c5b8e2d6a01'
            version: 'KqlParameterItem/1.0'
            name: 'TimeRange'
            type: 4
            isRequired: true
            value: {
              durationMs: 86400000
            }
            typeSettings: {
              allowCustom: true
            }
          }
        ]
      }
    }
    {
      type: 3
      name: 'recoveries-over-time'
      content: {
        version: 'KqlItem/1.0'
        title: 'Recoveries by action'
        query: recoveriesOverTimeQuery
        queryType: 0
        resourceType: 'microsoft.insights/components'
        visualization: 'timechart'
        size: 0
      }
    }
    {
      type: 3
      name: 'stalled-steps'
      content: {
        version: 'KqlItem/1.0'
        title: 'Stalled steps: overdue or failed steps the watchdog acted on'
        query: stalledStepsQuery
        queryType: 0
        resourceType: 'microsoft.insights/components'
        visualization: 'table'
        size: 0
      }
    }
    {
      type: 3
      name: 'stalled-instances'
      content: {
        version: 'KqlItem/1.0'
        title: 'Stalled instances: workflows whose scheduler missed its deadline'
        query: stalledInstancesTableQuery
        queryType: 0
        resourceType: 'microsoft.insights/components'
        visualization: 'table'
        size: 0
      }
    }
    {
      type: 3
      name: 'compensations'
      content: {
        version: 'KqlItem/1.0'
        title: 'Compensations and their outcome'
        query: compensationOutcomesQuery
        queryType: 0
        resourceType: 'microsoft.insights/components'
        visualization: 'table'
        size: 0
      }
    }
  ]
}

resource workbook 'Microsoft.Insights/workbooks@2023-06-01' = {
  name: guid(resourceGroup().id, appInsights.id, 'sas-recovery-workbook')
  location: location
  tags: tags
  kind: 'shared'
  properties: {
    displayName: 'Scheduler Agent Supervisor - recoveries (${applicationInsightsName})'
    category: 'workbook'
    // Lower-cased: the portal matches a workbook to its resource by a case-sensitive id comparison.
    sourceId: toLower(appInsights.id)
    serializedData: string(workbookContent)
  }
}

resource actionGroup 'Microsoft.Insights/actionGroups@2023-01-01' = if (!empty(alertEmail)) {
  name: 'ag-${applicationInsightsName}'
  location: 'global'
  tags: tags
  properties: {
    groupShortName: 'sas-alerts'
    enabled: true
    emailReceivers: [
      {
        name: 'operator'
        emailAddress: alertEmail
        useCommonAlertSchema: true
      }
    ]
  }
}

resource compensationFailedAlert 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = {
  name: 'alert-${applicationInsightsName}-compensation-failed'
  location: location
  tags: tags
  kind: 'LogAlert'
  properties: {
    displayName: 'Scheduler Agent Supervisor: a compensation failed'
    description: 'A workflow could not be compensated (sas.compensation_failures). Its ledger rows are in CompensationFailed and need an operator.'
    severity: 1
    enabled: true
    scopes: [
      appInsights.id
    ]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT15M'
    autoMitigate: true
    criteria: {
      allOf: [
        {
          query: compensationFailuresQuery
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
      actionGroups: empty(alertEmail) ? [] : [
        actionGroup.id
      ]
    }
  }
}

resource stalledInstancesAlert 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = {
  name: 'alert-${applicationInsightsName}-stalled-instances'
  location: location
  tags: tags
  kind: 'LogAlert'
  properties: {
    displayName: 'Scheduler Agent Supervisor: a workflow instance stalled'
    description: 'The watchdog found a workflow instance whose scheduler missed its deadline (custom event sas.instance_stalled) and acted on it; check that it resumed or compensated.'
    severity: 2
    enabled: true
    scopes: [
      appInsights.id
    ]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT15M'
    autoMitigate: true
    criteria: {
      allOf: [
        {
          query: stalledInstancesQuery
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
      actionGroups: empty(alertEmail) ? [] : [
        actionGroup.id
      ]
    }
  }
}

resource recoverySurgeAlert 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = {
  name: 'alert-${applicationInsightsName}-recovery-surge'
  location: location
  tags: tags
  kind: 'LogAlert'
  properties: {
    displayName: 'Scheduler Agent Supervisor: many recoveries'
    description: 'More than ${recoveryAlertThreshold} recovery actions (sas.recoveries) in 15 minutes: a downstream service or an agent is probably failing.'
    severity: 2
    enabled: true
    scopes: [
      appInsights.id
    ]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT15M'
    autoMitigate: true
    criteria: {
      allOf: [
        {
          query: recoveriesQuery
          timeAggregation: 'Total'
          metricMeasureColumn: 'occurrences'
          operator: 'GreaterThan'
          threshold: recoveryAlertThreshold
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    actions: {
      actionGroups: empty(alertEmail) ? [] : [
        actionGroup.id
      ]
    }
  }
}

output logAnalyticsWorkspaceId string = workspace.id
output applicationInsightsId string = appInsights.id
output applicationInsightsName string = appInsights.name
output workbookId string = workbook.id
output actionGroupId string = empty(alertEmail) ? '' : actionGroup.id
