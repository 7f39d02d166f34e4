// Durable Task Scheduler: the managed Durable Functions backend, deployed only when main.bicep's durableBackend
// is 'DurableTaskScheduler' (the default backend is the Azure Storage provider in the app's storage account).
// The app reaches it with its user-assigned identity (Durable Task Data Contributor on the scheduler) through
// DURABLE_TASK_SCHEDULER_CONNECTION_STRING (Endpoint=...;Authentication=ManagedIdentity;ClientID=...), named by
// the packaged host.json, which says azureManaged (infra/host_json.py).
// See docs/deploy.md, "Durable backend", for when to pick it.

@description('Scheduler name (3-64 letters, digits and hyphens).')
@minLength(3)
@maxLength(64)
param name string

@description('Azure region (must offer the Durable Task Scheduler).')
param location string

@description('Tags applied to the scheduler.')
param tags object = {}

@description('Task hub name (TASK_HUB_NAME): the same name the Azure Storage provider would use.')
param taskHubName string

@description('Consumption (pay per action) or Dedicated (reserved capacity units).')
@allowed([
  'Consumption'
  'Dedicated'
])
param skuName string = 'Consumption'

@description('Principal (object) id of the Function App\'s user-assigned managed identity.')
param principalId string

@description('Addresses allowed to reach the scheduler (CIDR). The default admits all: the Function App has no fixed outbound address on Flex Consumption without VNet integration, so Entra ID + RBAC control access; narrow it when the app has one (NAT gateway, VNet).')
param ipAllowlist array = [
  '0.0.0.0/0'
]

@description('Object id of the operator who may read orchestrations in the scheduler\'s dashboard (Durable Task Data Reader); empty = none.')
param operatorPrincipalId string = ''

@description('Principal type of operatorPrincipalId.')
@allowed([
  'User'
  'Group'
  'ServicePrincipal'
])
param operatorPrincipalType string = 'User'

// Durable Task Data Contributor: start, query and raise events to orchestrations, and process work items.
var durableTaskDataContributor = '0ad04412-c4d5-4796-b79c-f76d14c8d402'
// Durable Task Data Reader: the dashboard's view of orchestrations and their histories, read only:
// operators act through the app's operator API, which audits every action in the ledger.
var durableTaskDataReader = 'd6a5505f-6ebb-45a4-896e-ac8274cfc0ac'

resource scheduler 'Microsoft.DurableTask/schedulers@2025-11-01' = {
  name: name
  location: location
  tags: tags
  properties: {
    sku: {
      name: skuName
    }
    // An empty allow list denies every caller (see the parameter for why the default admits all).
    ipAllowlist: ipAllowlist
  }
}

resource taskHub 'Microsoft.DurableTask/schedulers/taskHubs@2025-11-01' = {
  parent: scheduler
  name: taskHubName
}

resource durableTaskDataContributorRole 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(scheduler.id, principalId, durableTaskDataContributor)
  scope: scheduler
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', durableTaskDataContributor)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}

resource operatorDashboardRole 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(operatorPrincipalId)) {
  name: guid(scheduler.id, operatorPrincipalId, durableTaskDataReader)
  scope: scheduler
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', durableTaskDataReader)
    principalId: operatorPrincipalId
    principalType: operatorPrincipalType
  }
}

output name string = scheduler.name
output endpoint string = scheduler.properties.endpoint
output taskHubName string = taskHub.name
