// AcrPull for the containerApp pools' identities on the private Azure Container Registry their image comes
// from. The same deployment creates those identities (agent-pool.bicep), so nobody outside it could grant the
// role before the first revision tries to pull: without this module that revision fails (ImagePullBackOff).
// Deployed at the registry's resource group (main.bicep scopes it from agentPoolRegistryId), scoped to the
// registry itself, never its group or subscription.

@description('Name of the registry (in this module\'s resource group).')
param registryName string

@description('[{ principalId, pull }]: one row per pool served outside the app; pull = the pool runs on Container Apps.')
param pools array

var acrPullRoleId = '7f951dda-4ed3-4680-a7ca-43fe172d538d'

resource registry 'Microsoft.ContainerRegistry/registries@2023-07-01' existing = {
  name: registryName
}

resource acrPull 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for pool in filter(pools, p => p.pull): {
  name: guid(registry.id, pool.principalId, acrPullRoleId)
  scope: registry
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', acrPullRoleId)
    principalId: pool.principalId
    principalType: 'ServicePrincipal'
  }
}]
