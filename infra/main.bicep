// Scheduler Agent Supervisor on Azure Functions: everything one environment needs, in one resource group.
//
//   az deployment group create -g <rg> --parameters infra/main.dev.bicepparam
//   (the .bicepparam's `using` line names this template: no --template-file beside it)
//
// Resource-group scope (azd: a beta feature, "resource group scoped deployments"; set AZURE_RESOURCE_GROUP).
// See docs/deploy.md. No secret is created, stored or output: every connection uses the Function App's
// user-assigned managed identity and the RBAC roles granted in modules/role-assignments.bicep.

targetScope = 'resourceGroup'

@description('Environment name (dev, test, prod, ...; azd allows letters, digits and - _ . ( ), up to 64). Resource names carry only its first 8 letters and digits, lower-cased, beside a unique token.')
@minLength(1)
@maxLength(64)
param environmentName string

@description('Azure region of every resource (must offer Flex Consumption). Defaults to the resource group\'s.')
param location string = resourceGroup().location

@description('Short workload prefix used in resource names.')
@minLength(2)
@maxLength(8)
param namePrefix string = 'sas'

@description('Tags applied to every resource.')
param tags object = {}

@description('Storage replication: Standard_ZRS (or GZRS) for production.')
@allowed([
  'Standard_LRS'
  'Standard_ZRS'
  'Standard_GRS'
  'Standard_GZRS'
])
param storageSku string = 'Standard_LRS'

@description('Flex Consumption: maximum instances.')
@minValue(40)
@maxValue(1000)
param maximumInstanceCount int = 100

@description('Flex Consumption: spread instances over availability zones (billed always-ready instances; region must support it).')
param zoneRedundant bool = false

@description('Flex Consumption: always-ready instances of the durable scale group (1 recommended by the Durable Functions docs for Flex; at least 2 with zoneRedundant).')
@minValue(0)
param durableAlwaysReadyInstanceCount int = 1

@description('Durable Functions backend: AzureStorage (default; the task hub lives in the app\'s storage account, as in local runs and tests) or DurableTaskScheduler (provisions Microsoft.DurableTask/schedulers). See docs/deploy.md.')
@allowed([
  'AzureStorage'
  'DurableTaskScheduler'
])
param durableBackend string = 'AzureStorage'

@description('Durable Task Scheduler only: its region (empty = location). Its regions are not Flex Consumption\'s: pick the nearest one that offers Microsoft.DurableTask/schedulers when location does not.')
param durableTaskSchedulerLocation string = ''

@description('Object id of the deployer/operator who gets the data roles the operator CLI needs (azd passes AZURE_PRINCIPAL_ID); empty = none.')
param principalId string = ''

@description('Durable Task Scheduler only: addresses allowed to reach it (CIDR); the default admits all and Entra ID + RBAC control access (the app has no fixed outbound address without VNet integration).')
param durableTaskSchedulerIpAllowlist array = [
  '0.0.0.0/0'
]

@description('Principal type of principalId.')
@allowed([
  'User'
  'Group'
  'ServicePrincipal'
])
param principalType string = 'User'

@description('Client id of the Entra app registration for App Service Authentication (app roles Workflows.Read, Workflows.Operate; docs/deploy.md). Empty = no platform authentication, function keys only: acceptable for dev, refused by main.prod.bicepparam.')
param authClientId string = ''

@description('Tenant id of that app registration (default: the deployment\'s tenant).')
param authTenantId string = tenant().tenantId

@description('Flex Consumption: memory per instance (MB).')
@allowed([
  2048
  4096
])
param instanceMemoryMB int = 2048

@description('Days Log Analytics keeps telemetry.')
@minValue(30)
@maxValue(730)
param logRetentionDays int = 30

@description('Daily ingestion cap of the Log Analytics workspace, in GB (-1 = no cap).')
@minValue(-1)
param logDailyCapGb int = 1

@description('Alert when more recoveries than this happen within 15 minutes.')
@minValue(1)
param recoveryAlertThreshold int = 20

@description('E-mail address notified by the alerts; empty = no notification (alerts still fire in the portal).')
param alertEmail string = ''

// ----- Application settings (defaults = workflow_core/settings.py DOCUMENTED_SETTINGS) -----

@description('LEDGER_TABLE_NAME: table of step rows and their audit trail.')
param ledgerTableName string = 'StepLedger'

@description('DEADLINE_INDEX_TABLE_NAME: table of the deadline index.')
param deadlineIndexTableName string = 'StepDeadlines'

@description('WORK_QUEUE_NAME: queue the scheduler sends step work to.')
param workQueueName string = 'agent-work'

@description('RESULT_QUEUE_NAME: queue agents send step results to (at most 46 characters: answer queues are <it>-answers-<up to 8 more>).')
@minLength(3)
@maxLength(46)
param resultQueueName string = 'agent-results'

@description('DEAD_LETTER_QUEUE_NAME: poison queue of the storage-queue transport.')
param deadLetterQueueName string = 'agent-work-poison'

@description('MAX_DELIVERY_COUNT: deliveries of one message before it is dead-lettered.')
@minValue(1)
param maxDeliveryCount int = 5

@description('WATCHDOG_SCHEDULE: NCRONTAB schedule of the supervisor\'s watchdog.')
param watchdogSchedule string = '*/30 * * * * *'

@description('CANARY_SCHEDULE: NCRONTAB schedule of the recovery canary (one sas-canary run each time).')
param canarySchedule string = '0 0 * * * *'

@description('CANARY_ENABLED: run the recovery canary (docs/operations.md, "Recovery canary").')
param canaryEnabled bool = true

@description('The recovery canary\'s period in hours (matches canarySchedule): the stale alert waits two.')
@minValue(1)
@maxValue(12)
param canaryPeriodHours int = 1

@description('WATCHDOG_BATCH_SIZE: overdue steps handled per watchdog tick.')
@minValue(1)
param watchdogBatchSize int = 100

@description('WATCHDOG_GRACE_SECONDS: how late past its deadline a step may be before the watchdog acts.')
@minValue(0)
param watchdogGraceSeconds int = 30

@description('MAX_COMPENSATION_RESTARTS: restarts of one instance\'s compensation before it is flagged for an operator.')
@minValue(0)
param maxCompensationRestarts int = 3

@description('MAX_SCHEDULER_TERMINATIONS: terminations of one instance\'s stalled scheduler (or compensation) that did not take before it is flagged for an operator.')
@minValue(1)
param maxSchedulerTerminations int = 2

@description('MAX_PAYLOAD_BYTES: largest workflow input, step input or step output, in bytes of JSON (at most 1 MiB).')
@minValue(1024)
@maxValue(1048576)
param maxPayloadBytes int = 1048576

@description('PAYLOAD_CONTAINER_NAME: blob container of payloads too large for a ledger property.')
param payloadContainerName string = 'sas-payloads'

// A payload blob is deleted this long after its last write: it must outlive the longest-running workflow
// that may still read it (a retry, a resume, a compensation), plus the time a flagged instance waits for
// an operator. The workflows in workflows/ finish within hours (with their retries, resumes and
// compensation); 90 days leaves ample room. Raise it if yours run, or wait for operators, longer.
@description('Days after its last write that a large payload is deleted (lifecycle rule on PAYLOAD_CONTAINER_NAME).')
@minValue(7)
param payloadRetentionDays int = 90

@description('TASK_HUB_NAME: Durable Functions task hub (3-45 letters and digits, starting with a letter).')
@minLength(3)
@maxLength(45)
param taskHubName string = 'SchedulerAgentSupervisor'

@description('Service Bus peek-lock duration (ISO 8601, at most PT5M). The host renews it while a handler runs (host.json maxAutoLockRenewalDuration); see docs/deploy.md for the arithmetic.')
param serviceBusLockDuration string = 'PT5M'

@description('Service Bus duplicate detection window (ISO 8601).')
param duplicateDetectionWindow string = 'PT10M'

// ----- Agent pools (docs/transport.md, docs/deploy.md "Agent pools") -----

// Pool names are those of workflows/pools.yaml: 1-20 lowercase letters, digits and single dashes. The default
// pool always exists (every agent named in no pool is in it) and is hosted by the app unless listed otherwise.
@description('Agent pools: [{ name, hosting: \'app\' | \'external\' | \'containerApp\' | \'logicApp\', messageOnly?: bool, answerQueues?: string[] (external messageOnly pools whose agents ask before an effect: Service Bus queues <resultQueueName>-answers-..., one per agent process), image?: string (containerApp), maxReplicas?: int (containerApp), agent?: string, compensator?: string, serviceUrl?: string, workflowPlanId?: string (logicApp) }]. Pool p\'s work queue is <workQueueName>-p (the default pool\'s is workQueueName); the app hosts the pools with hosting \'app\' (HOSTED_POOLS); every other pool gets its own managed identity with least-privilege roles; containerApp pools also run sas-agent on Azure Container Apps; a logicApp pool is a Logic App Standard with its system identity instead.')
param agentPools array = [
  {
    name: 'default'
    hosting: 'app'
  }
]

@description('containerApp pools: active messages per replica before the KEDA Service Bus scaler adds one.')
@minValue(1)
param agentPoolMessagesPerReplica int = 5

@description('containerApp pools: registry server of a private image (pulled with the pool\'s identity, which then needs AcrPull on it); empty = a public image.')
param agentPoolRegistryServer string = ''

@description('containerApp pools: resource id of the Azure Container Registry their image comes from; the deployment grants each containerApp pool identity AcrPull on it (and derives agentPoolRegistryServer when that is empty). Empty = grant nothing: a public image, or a registry outside Azure.')
param agentPoolRegistryId string = ''

// ----- Names -----

var resourceToken = toLower(uniqueString(subscription().id, resourceGroup().id, environmentName))
// Resource names never carry the raw environment name: azd accepts `_ . ( )` and 64 characters, which
// site, Service Bus and Log Analytics names refuse. Its letters and digits only, lower-cased, at most 8
// (uniqueness comes from resourceToken, which hashes the full name); tests/infra checks every name
// rule over hostile environment names.
var environmentSlug = take(toLower(replace(replace(replace(replace(replace(replace(environmentName, '-', ''), '_', ''), '.', ''), '(', ''), ')', ''), ' ', '')), 8)
var baseName = empty(environmentSlug) ? namePrefix : '${namePrefix}-${environmentSlug}'
var allTags = union(tags, {
  workload: 'scheduler-agent-supervisor'
  environment: environmentName
  'azd-env-name': environmentName
})
var useDurableTaskScheduler = durableBackend == 'DurableTaskScheduler'
var functionAppName = 'func-${baseName}-${resourceToken}'
var storageAccountName = take('st${resourceToken}', 24)
var deploymentContainerName = 'app-package-${resourceToken}'

// Every pool, the default one first, each with its queue and defaults filled in.
var defaultPoolListed = !empty(filter(agentPools, pool => (pool.name == 'default')))
var allPools = concat(defaultPoolListed ? [] : [
  {
    name: 'default'
    hosting: 'app'
  }
], agentPools)
var pools = [for pool in allPools: {
  name: pool.name
  queue: (pool.name == 'default') ? workQueueName : '${workQueueName}-${pool.name}'
  hosting: pool.hosting
  messageOnly: pool.?messageOnly ?? false
  answerQueues: pool.?answerQueues ?? []
  image: pool.?image ?? ''
  maxReplicas: pool.?maxReplicas ?? 10
}]
var defaultPool = first(filter(pools, pool => (pool.name == 'default')))
var extraPools = filter(pools, pool => (pool.name != 'default'))
var hostedPoolNames = [for pool in filter(pools, pool => (pool.hosting == 'app')): pool.name]
var extraPoolQueueNames = [for pool in extraPools: pool.queue]
var hostedExtraPoolQueueNames = [for pool in filter(extraPools, pool => (pool.hosting == 'app')): pool.queue]
var remoteExtraPoolQueueNames = [for pool in filter(extraPools, pool => (pool.hosting != 'app')): pool.queue]
var remotePools = filter(pools, pool => !contains(['app', 'logicApp'], pool.hosting)) // a logicApp pool has its system identity
var containerAppPools = filter(pools, pool => (pool.hosting == 'containerApp'))
// The answer queues of the message-only pools that ask before an effect (docs/agents.md, "Ask whether the
// attempt is still current"): on Service Bus they are the operator's, so infra creates them.
var answerQueuePrefix = '${resultQueueName}-answers-'
var answerQueuesPerPool = [for pool in remotePools: pool.answerQueues]
var answerQueueNames = flatten(answerQueuesPerPool)
var poolIdentityPrefix = 'id-${baseName}-${resourceToken}-pool'
// Without a registry id the (unused) scope is this resource group's: never an index into an empty string.
var registryIdParts = split(empty(agentPoolRegistryId) ? resourceGroup().id : agentPoolRegistryId, '/')
var agentPoolRegistryLoginServer = !empty(agentPoolRegistryServer) ? agentPoolRegistryServer : (empty(agentPoolRegistryId) ? '' : '${last(registryIdParts)}${environment().suffixes.acrLoginServer}')

// agentPools input checks: modules/agent-pools-validation.bicep fails the deployment up front on any. Bicep has
// no regular expressions: a name is lower-case, 1-20 long, of letters, digits and single inner dashes when it
// equals its lower-case form and holds none of the characters a queue or identity name refuses.
var poolNameRefused = [' ', '_', '.', '/', ':', '@', '#', '+', '=', ',', ';', '*', '?', '!', '~', '&', '%', '$', '(', ')']
var poolNames = [for pool in agentPools: contains(pool, 'name') ? string(pool.name) : '']
var poolsWithAnUnknownHosting = [for pool in filter(agentPools, pool => !contains(['app', 'external', 'containerApp', 'logicApp'], contains(pool, 'hosting') ? pool.hosting : '')): contains(pool, 'name') ? pool.name : '?']
var logicAppPoolsWithoutAgentOrService = [for pool in filter(agentPools, pool => (((contains(pool, 'hosting') ? pool.hosting : '') == 'logicApp') && (empty(contains(pool, 'agent') ? pool.agent : '') || (empty(contains(pool, 'serviceUrl') ? pool.serviceUrl : '') || ((contains(pool, 'name') ? pool.name : '') == 'default'))))): contains(pool, 'name') ? pool.name : '?']
var declaredAnswerQueues = [for pool in agentPools: (contains(pool, 'answerQueues') ? pool.answerQueues : [])]
var poolAnswerQueues = flatten(declaredAnswerQueues)
var containerAppPoolsMessageOnly = [for pool in filter(agentPools, pool => (((contains(pool, 'hosting') ? pool.hosting : '') == 'containerApp') && (contains(pool, 'messageOnly') ? pool.messageOnly : false))): pool.name]
var answerQueuesOutsideAnExternalMessageOnlyPool = [for pool in filter(agentPools, pool => ((length(contains(pool, 'answerQueues') ? pool.answerQueues : []) > 0) && (((contains(pool, 'hosting') ? pool.hosting : '') != 'external') || !(contains(pool, 'messageOnly') ? pool.messageOnly : false)))): pool.name]
var containerAppPoolsWithoutImageOrReplicas = [for pool in filter(agentPools, pool => (((contains(pool, 'hosting') ? pool.hosting : '') == 'containerApp') && (empty(contains(pool, 'image') ? pool.image : '') || ((contains(pool, 'maxReplicas') ? pool.maxReplicas : 10) < 1)))): contains(pool, 'name') ? pool.name : '?']
var poolValidation = {
  poolsWithAnUnknownHosting: poolsWithAnUnknownHosting
  poolsWithABadName: filter(poolNames, name => (empty(name) || ((length(name) > 20) || ((toLower(name) != name) || (startsWith(name, '-') || (endsWith(name, '-') || (contains(name, '--') || (length(split(name, poolNameRefused)) > 1))))))))
  // union() drops repeats: fewer names after it means some name is listed twice
  poolNamesListedTwice: (length(union(poolNames, [])) == length(poolNames)) ? [] : poolNames
  containerAppPoolsWithoutImageOrReplicas: containerAppPoolsWithoutImageOrReplicas
  logicAppPoolsWithoutAgentOrService: logicAppPoolsWithoutAgentOrService
  // sas-agent on Container Apps records in the ledger itself: a message-only pool there cannot work
  containerAppPoolsMessageOnly: containerAppPoolsMessageOnly
  // only an agent that cannot read the ledger asks: answer queues belong to external messageOnly pools
  answerQueuesOutsideAnExternalMessageOnlyPool: answerQueuesOutsideAnExternalMessageOnlyPool
  // the app answers only <resultQueueName>-answers-<...>, 3-63 lower-case letters, digits and single dashes
  answerQueuesWithABadName: filter(poolAnswerQueues, queue => ((!startsWith(string(queue), answerQueuePrefix)) || ((length(string(queue)) > 63) || ((toLower(string(queue)) != string(queue)) || (endsWith(string(queue), '-') || (contains(string(queue), '--') || (length(split(string(queue), poolNameRefused)) > 1)))))))
  answerQueuesListedTwice: (length(union(poolAnswerQueues, [])) == length(poolAnswerQueues)) ? [] : poolAnswerQueues
}

module identity 'modules/identity.bicep' = {
  name: 'identity'
  params: {
    name: 'id-${baseName}-${resourceToken}'
    location: location
    tags: allTags
  }
}

module monitoring 'modules/monitoring.bicep' = {
  name: 'monitoring'
  params: {
    logAnalyticsName: 'log-${baseName}-${resourceToken}'
    applicationInsightsName: 'appi-${baseName}-${resourceToken}'
    location: location
    tags: allTags
    retentionInDays: logRetentionDays
    dailyQuotaGb: logDailyCapGb
    recoveryAlertThreshold: recoveryAlertThreshold
    alertEmail: alertEmail
  }
}

module storage 'modules/storage.bicep' = {
  name: 'storage'
  params: {
    name: storageAccountName
    location: location
    tags: allTags
    skuName: storageSku
    deploymentContainerName: deploymentContainerName
    ledgerTableName: ledgerTableName
    deadlineIndexTableName: deadlineIndexTableName
    workQueueName: workQueueName
    resultQueueName: resultQueueName
    deadLetterQueueName: deadLetterQueueName
    payloadContainerName: payloadContainerName
    payloadRetentionDays: payloadRetentionDays
    logAnalyticsWorkspaceId: monitoring.outputs.logAnalyticsWorkspaceId
  }
}

module serviceBus 'modules/servicebus.bicep' = {
  name: 'servicebus'
  params: {
    name: 'sb-${baseName}-${resourceToken}'
    location: location
    tags: allTags
    workQueueName: workQueueName
    poolQueueNames: extraPoolQueueNames
    answerQueueNames: answerQueueNames
    resultQueueName: resultQueueName
    maxDeliveryCount: maxDeliveryCount
    lockDuration: serviceBusLockDuration
    duplicateDetectionWindow: duplicateDetectionWindow
    logAnalyticsWorkspaceId: monitoring.outputs.logAnalyticsWorkspaceId
  }
  // Pool queues only from a valid agentPools (as every module below that takes the pools).
  dependsOn: [
    agentPoolsValidation
  ]
}

module roleAssignments 'modules/role-assignments.bicep' = {
  name: 'role-assignments'
  params: {
    principalId: identity.outputs.principalId
    storageAccountName: storage.outputs.name
    serviceBusNamespaceName: serviceBus.outputs.name
    applicationInsightsName: monitoring.outputs.applicationInsightsName
    workQueueName: workQueueName
    defaultPoolHosted: (defaultPool.hosting == 'app')
    hostedPoolQueueNames: hostedExtraPoolQueueNames
    remotePoolQueueNames: remoteExtraPoolQueueNames
    answerQueueNames: answerQueueNames
    resultQueueName: resultQueueName
    ledgerTableName: ledgerTableName
    deadlineIndexTableName: deadlineIndexTableName
    payloadContainerName: payloadContainerName
    operatorPrincipalId: principalId
    operatorPrincipalType: principalType
  }
  // The role assignments on the queues and tables need them to exist.
  dependsOn: [
    storage
    serviceBus
    agentPoolsValidation
  ]
}

// Dead-letter alerts: the Service Bus metric of the namespace, filtered to the results queue, and one alert per
// agent pool on its work queue.
module serviceBusAlerts 'modules/servicebus-alerts.bicep' = {
  name: 'servicebus-alerts'
  params: {
    name: 'alert-sb-${baseName}-${resourceToken}-dead-lettered-results'
    poolAlertNamePrefix: 'alert-sb-${baseName}-${resourceToken}-dead-lettered-work'
    tags: allTags
    serviceBusNamespaceName: serviceBus.outputs.name
    resultQueueName: resultQueueName
    pools: pools
    actionGroupId: monitoring.outputs.actionGroupId
  }
  dependsOn: [
    agentPoolsValidation
  ]
}

module agentPoolsValidation 'modules/agent-pools-validation.bicep' = {
  name: 'agent-pools-validation'
  params: {
    poolsWithAnUnknownHosting: poolValidation.poolsWithAnUnknownHosting
    poolsWithABadName: poolValidation.poolsWithABadName
    poolNamesListedTwice: poolValidation.poolNamesListedTwice
    containerAppPoolsWithoutImageOrReplicas: poolValidation.containerAppPoolsWithoutImageOrReplicas
    logicAppPoolsWithoutAgentOrService: poolValidation.logicAppPoolsWithoutAgentOrService
    containerAppPoolsMessageOnly: poolValidation.containerAppPoolsMessageOnly
    answerQueuesOutsideAnExternalMessageOnlyPool: poolValidation.answerQueuesOutsideAnExternalMessageOnlyPool
    answerQueuesWithABadName: poolValidation.answerQueuesWithABadName
    answerQueuesListedTwice: poolValidation.answerQueuesListedTwice
  }
}

// Recovery canary alerts: a failed verdict, no pass for two canary periods (sas.canary.runs), and one
// pool without a pass for two periods (sas.canary.stale_pools). Disabled with the canary (canaryEnabled
// false): deployed disabled rather than left out, so turning the canary off also silences alerts an
// earlier deployment created.
module canaryAlerts 'modules/canary-alerts.bicep' = {
  name: 'canary-alerts'
  params: {
    applicationInsightsName: monitoring.outputs.applicationInsightsName
    location: location
    tags: allTags
    actionGroupId: monitoring.outputs.actionGroupId
    canaryPeriodHours: canaryPeriodHours
    enabled: canaryEnabled
  }
}

// A pool served outside the Function App (a sas-agent runner anywhere, an agent in another language, or the
// Container Apps pool below): its own identity, with its pool's rights only.
module agentPool 'modules/agent-pool.bicep' = [for pool in remotePools: {
  name: 'agent-pool-${pool.name}'
  params: {
    identityName: '${poolIdentityPrefix}-${pool.name}'
    location: location
    tags: allTags
    poolQueueName: pool.queue
    scalesOnQueue: (pool.hosting == 'containerApp')
    messageOnly: pool.messageOnly
    answerQueueNames: pool.answerQueues
    serviceBusNamespaceName: serviceBus.outputs.name
    resultQueueName: resultQueueName
    storageAccountName: storage.outputs.name
    ledgerTableName: ledgerTableName
    deadlineIndexTableName: deadlineIndexTableName
    payloadContainerName: payloadContainerName
    applicationInsightsName: monitoring.outputs.applicationInsightsName
  }
  dependsOn: [
    agentPoolsValidation
  ]
}]

// AcrPull on the private registry for the identities created above, before the first revision pulls.
module agentPoolRegistryPull 'modules/agent-pool-registry-pull.bicep' = if (!empty(agentPoolRegistryId) && !empty(containerAppPools)) {
  name: 'agent-pool-registry-pull'
  scope: resourceGroup(registryIdParts[2], registryIdParts[4])
  params: {
    registryName: last(registryIdParts)
    pools: [for (pool, i) in remotePools: {
      principalId: agentPool[i].outputs.principalId
      pull: (pool.hosting == 'containerApp')
    }]
  }
  dependsOn: [
    agentPoolsValidation
  ]
}

// Optional: containerApp pools run sas-agent on Azure Container Apps, scaled by KEDA on their queue's backlog.
// Nothing is created unless a pool asks for it.
module agentPoolContainerApps 'modules/agent-pool-containerapp.bicep' = if (!empty(containerAppPools)) {
  name: 'agent-pool-containerapps'
  params: {
    environmentName: 'cae-${baseName}-${resourceToken}'
    appNameSuffix: take(resourceToken, 8)
    location: location
    tags: allTags
    pools: containerAppPools
    identityNamePrefix: poolIdentityPrefix
    messagesPerReplica: agentPoolMessagesPerReplica
    registryServer: agentPoolRegistryLoginServer
    logAnalyticsWorkspaceId: monitoring.outputs.logAnalyticsWorkspaceId
    applicationInsightsName: monitoring.outputs.applicationInsightsName
    storageAccountName: storage.outputs.name
    serviceBusNamespaceName: serviceBus.outputs.name
    ledgerTableName: ledgerTableName
    deadlineIndexTableName: deadlineIndexTableName
    workQueueName: workQueueName
    resultQueueName: resultQueueName
    maxDeliveryCount: maxDeliveryCount
    maxPayloadBytes: maxPayloadBytes
    payloadContainerName: payloadContainerName
  }
  // The runner claims work as soon as it starts: its identity and roles first (AcrPull included).
  dependsOn: [
    agentPool
    agentPoolRegistryPull
    agentPoolsValidation
  ]
}

// Optional: logicApp pools are served by a Logic App Standard running examples/logic-app-agent's workflow, with
// its own plan (or the shared workflowPlanId), runtime storage, system identity and answer queue.
var logicAppPools = filter(agentPools, pool => ((pool.?hosting ?? '') == 'logicApp'))
module agentPoolLogicApps 'modules/agent-pool-logicapp.bicep' = [for pool in logicAppPools: {
  name: 'agent-pool-logicapp-${pool.name}'
  params: {
    poolName: pool.name
    nameSuffix: '${baseName}-${resourceToken}'
    workflowPlanId: pool.?workflowPlanId ?? ''
    location: location
    tags: allTags
    poolQueueName: '${workQueueName}-${pool.name}'
    resultQueueName: resultQueueName
    serviceBusNamespaceName: serviceBus.outputs.name
    appPrincipalId: identity.outputs.principalId
    agent: pool.agent
    compensator: pool.?compensator ?? ''
    serviceUrl: pool.serviceUrl
    applicationInsightsName: monitoring.outputs.applicationInsightsName
  }
  // The pool's work queue must exist before its role assignment, and the pools must be valid.
  dependsOn: [
    agentPoolsValidation
  ]
}]

module durableTaskScheduler 'modules/durable-task-scheduler.bicep' = if (useDurableTaskScheduler) {
  name: 'durable-task-scheduler'
  params: {
    name: 'dts-${baseName}-${resourceToken}'
    location: empty(durableTaskSchedulerLocation) ? location : durableTaskSchedulerLocation
    tags: allTags
    taskHubName: taskHubName
    principalId: identity.outputs.principalId
    ipAllowlist: durableTaskSchedulerIpAllowlist
    operatorPrincipalId: principalId
    operatorPrincipalType: principalType
  }
}

module functionApp 'modules/function-app.bicep' = {
  name: 'function-app'
  params: {
    name: functionAppName
    planName: 'plan-${baseName}-${resourceToken}'
    location: location
    tags: allTags
    identityId: identity.outputs.id
    identityClientId: identity.outputs.clientId
    storageAccountName: storage.outputs.name
    deploymentContainerName: deploymentContainerName
    serviceBusNamespaceName: serviceBus.outputs.name
    applicationInsightsName: monitoring.outputs.applicationInsightsName
    maximumInstanceCount: maximumInstanceCount
    instanceMemoryMB: instanceMemoryMB
    zoneRedundant: zoneRedundant
    durableAlwaysReadyInstanceCount: durableAlwaysReadyInstanceCount
    durableBackend: durableBackend
    durableTaskSchedulerEndpoint: useDurableTaskScheduler ? durableTaskScheduler!.outputs.endpoint : ''
    ledgerTableName: ledgerTableName
    deadlineIndexTableName: deadlineIndexTableName
    workQueueName: workQueueName
    hostedPools: join(hostedPoolNames, ',')
    answerQueues: join(answerQueueNames, ',')
    identityPrincipalId: identity.outputs.principalId
    agentPoolIdentities: [for (pool, i) in remotePools: {
      name: pool.name
      principalId: agentPool[i].outputs.principalId
      queue: pool.queue
      scalesOnQueue: (pool.hosting == 'containerApp')
      messageOnly: pool.messageOnly
      answerQueues: pool.answerQueues
    }]
    resultQueueName: resultQueueName
    deadLetterQueueName: deadLetterQueueName
    maxDeliveryCount: maxDeliveryCount
    watchdogSchedule: watchdogSchedule
    canarySchedule: canarySchedule
    canaryEnabled: canaryEnabled
    watchdogBatchSize: watchdogBatchSize
    maxCompensationRestarts: maxCompensationRestarts
    maxSchedulerTerminations: maxSchedulerTerminations
    watchdogGraceSeconds: watchdogGraceSeconds
    maxPayloadBytes: maxPayloadBytes
    payloadContainerName: payloadContainerName
    taskHubName: taskHubName
  }
  // The host starts pulling its package and leasing blobs at once: grant the roles first.
  dependsOn: [
    roleAssignments
    durableTaskScheduler
  ]
}

// App Service Authentication (Easy Auth) with Microsoft Entra ID, only with an authClientId: every request
// needs a bearer token for the app registration, except the health probe; API callers get 401. The platform
// then sets WEBSITE_AUTH_ENABLED and passes X-MS-CLIENT-PRINCIPAL (app roles Workflows.Read, Workflows.Operate).
// A module of its own so its resource is unconditional (checkov's CKV_AZURE_70 crashes on a conditional one).
module authentication 'modules/app-authentication.bicep' = if (!empty(authClientId)) {
  name: 'app-authentication'
  params: {
    functionAppName: functionApp.outputs.name
    authClientId: authClientId
    authTenantId: authTenantId
  }
}

output functionAppName string = functionApp.outputs.name
output functionAppHostName string = functionApp.outputs.defaultHostName
output workflowStarterUrl string = 'https://${functionApp.outputs.defaultHostName}/api/workflows/{name}/instances'
output storageAccountName string = storage.outputs.name
output serviceBusNamespace string = serviceBus.outputs.fullyQualifiedNamespace
output applicationInsightsName string = monitoring.outputs.applicationInsightsName
output managedIdentityClientId string = identity.outputs.clientId
// The identity of each pool served outside the app: a runner elsewhere sets AZURE_CLIENT_ID to its clientId.
// Each logicApp pool's Logic App: deploy examples/logic-app-agent onto it (docs/agents.md, "A Logic App as an agent").
output agentPoolLogicApps array = [for (pool, i) in logicAppPools: {
  name: pool.name
  logicAppName: agentPoolLogicApps[i].outputs.name
  answerQueue: agentPoolLogicApps[i].outputs.answerQueueName
}]
output agentPoolIdentities array = [for (pool, i) in remotePools: {
  name: pool.name
  queue: pool.queue
  clientId: agentPool[i].outputs.clientId
  principalId: agentPool[i].outputs.principalId
}]
// azd conventions (azd reads these after provisioning).
output AZURE_LOCATION string = location
output AZURE_FUNCTION_APP_NAME string = functionApp.outputs.name
