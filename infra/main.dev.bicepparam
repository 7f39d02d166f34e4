// Development environment: single-zone, locally redundant, smallest scale-out ceiling.
//   infra/deploy.sh dev <resource-group> <location>
using './main.bicep'

param environmentName = 'dev'
param storageSku = 'Standard_LRS'
param maximumInstanceCount = 40
param instanceMemoryMB = 2048
param zoneRedundant = false
param durableAlwaysReadyInstanceCount = 1
param logRetentionDays = 30
param logDailyCapGb = 1
param recoveryAlertThreshold = 20
param alertEmail = ''
param tags = {
  environment: 'dev'
}
