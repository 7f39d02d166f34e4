// Durable Task Scheduler: the managed Durable Functions backend, deployed only when main.bicep's durableBackend
// is 'DurableTaskScheduler' (the default backend is the Azure Storage provider in the app's storage account).
// The app reaches it with its user-assigned identity (Durable Task Data Contributor on the scheduler) through
// DURABLE_TASK_SCHEDULER_CONNECTION_STRING (Endpoint=...;Authentication=ManagedIdentity;ClientID=...), and
// host.json's storageProvider type is overridden to azureManaged by an app setting (modules/function-app.bicep).
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

// Durable Task Data Contributor: start, query and raise events to orchestrations, and process work items.
var durableTaskDataContributor = '0ad04412-c4d5-4796-b79c-f76d14c8d402'

resource scheduler 'Microsoft.DurableTask/schedulers@2025-11-01' = {
  name: name
  location: location
  tags: tags
  properties: {
    sku: {
      name: skuName
    }
    // An empty allow list denies every caller; the Function App has no fixed outbound address on Flex
    // Consumption without VNet integration, so access is controlled by Entra ID + RBAC instead.
    ipAllowlist: [
      '0.0.0.0/0'
    ]
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

output name string = scheduler.name
output endpoint string = scheduler.properties.endpoint
output taskHubName string = taskHub.name
