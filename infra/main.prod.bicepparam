// Production: zone-redundant storage and plan (pick a region where Flex Consumption supports availability
// zones; the plan then keeps at least two billed always-ready instances per function group), longer
// retention, and an e-mail receiver for the alerts (set it before the first deployment).
//   infra/deploy.sh prod <resource-group> <location>
using './main.bicep'

param environmentName = 'prod'
param storageSku = 'Standard_ZRS'
param maximumInstanceCount = 100
param instanceMemoryMB = 2048
param zoneRedundant = true
param logRetentionDays = 90
param recoveryAlertThreshold = 20
param alertEmail = ''
param tags = {
  environment: 'prod'
}
