// Production: zone-redundant storage and plan (pick a region where Flex Consumption supports availability
// zones; the plan then keeps at least two billed always-ready instances in each of this app's six scale
// groups: see docs/deploy.md), longer retention, and an e-mail receiver for the alerts (set it before the
// first deployment).
//   infra/deploy.sh prod <resource-group> <location>
using './main.bicep'

param environmentName = 'prod'
param storageSku = 'Standard_ZRS'
param maximumInstanceCount = 100
param instanceMemoryMB = 2048
param zoneRedundant = true
// Zone redundancy: at least 2 always-ready instances per scale group.
param durableAlwaysReadyInstanceCount = 2
param logRetentionDays = 90
param logDailyCapGb = 5
param recoveryAlertThreshold = 20
param alertEmail = ''
param tags = {
  environment: 'prod'
}
param authClientId = readEnvironmentVariable('SAS_AUTH_CLIENT_ID')
