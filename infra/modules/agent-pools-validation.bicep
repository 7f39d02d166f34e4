// Validation of main.bicep's agentPools: deploys nothing. Each parameter is a list of the pools that break
// one rule and must be empty (@maxLength(0)); ARM checks a nested deployment's parameters before it creates
// anything, so a bad agentPools fails the whole deployment up front, naming the rule (this parameter's
// name and description) and the offending pools, instead of half-creating queues and identities.
// (Bicep's user-defined types would say it more briefly, but the offline checks' parser does not read them.)

@description('Pools whose hosting is not one of app, external, containerApp, logicApp.')
@maxLength(0)
param poolsWithAnUnknownHosting array

@description('Pools whose name is not 1-20 lower-case letters, digits and single inner dashes (workflows/pools.yaml).')
@maxLength(0)
param poolsWithABadName array

@description('Pool names listed more than once.')
@maxLength(0)
param poolNamesListedTwice array

@description('containerApp pools without an image, or with maxReplicas below 1.')
@maxLength(0)
param containerAppPoolsWithoutImageOrReplicas array

@description('logicApp pools without an agent or a serviceUrl, or named default (the default pool\'s queue is the app\'s own work queue).')
@maxLength(0)
param logicAppPoolsWithoutAgentOrService array

@description('containerApp pools declared messageOnly: sas-agent on Container Apps records in the ledger itself, so such a pool cannot work; serve it with hosting external.')
@maxLength(0)
param containerAppPoolsMessageOnly array

@description('Pools with answerQueues that are not external messageOnly pools: only an agent that cannot read the ledger asks, and the app and a containerApp runner read it.')
@maxLength(0)
param answerQueuesOutsideAnExternalMessageOnlyPool array

@description('Answer queues not named <resultQueueName>-answers-<...> in at most 63 lower-case letters, digits and single dashes: the app answers no other queue (docs/agents.md).')
@maxLength(0)
param answerQueuesWithABadName array

@description('Answer queue names listed more than once (one queue per agent process).')
@maxLength(0)
param answerQueuesListedTwice array

output problemCount int = length(concat(poolsWithAnUnknownHosting, poolsWithABadName, poolNamesListedTwice, containerAppPoolsWithoutImageOrReplicas, containerAppPoolsMessageOnly, answerQueuesOutsideAnExternalMessageOnlyPool, answerQueuesWithABadName, answerQueuesListedTwice, logicAppPoolsWithoutAgentOrService))
