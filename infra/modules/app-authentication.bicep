// App Service Authentication (authsettingsV2) of the Function App: deployed only when main.bicep is given
// an authClientId. A module of its own, deployed conditionally from main.bicep, so that the resource
// here is unconditional: checkov's CKV_AZURE_70 crashes on a conditional config resource (it finds no
// properties on it), and scripts/check-infra fails on a crashed check.
@description('Name of the Function App the settings belong to.')
param functionAppName string

@description('Entra ID application (client) id whose tokens the app accepts.')
param authClientId string

@description('Entra ID tenant that issues the tokens.')
param authTenantId string

resource functionApp 'Microsoft.Web/sites@2024-04-01' existing = {
  name: functionAppName
}

resource authSettings 'Microsoft.Web/sites/config@2024-04-01' = {
  // checkov:skip=CKV_AZURE_13: This resource IS App Service Authentication; checkov reads the config child as a web app without auth settings.
  // checkov:skip=CKV_AZURE_66: Failed request tracing is a site logging setting, not part of authsettingsV2; checkov reads this authsettingsV2 config child as a whole web app; the site's own setting is on functionApp above.
  // checkov:skip=CKV_AZURE_63: HTTP logging is a site logging setting, not part of authsettingsV2; checkov reads this authsettingsV2 config child as a whole web app; the site's own setting is on functionApp above.
  // checkov:skip=CKV_AZURE_222: Public network access is a site property (suppressed with its reason on functionApp); checkov reads this authsettingsV2 config child as a whole web app; the site's own setting is on functionApp above.
  // checkov:skip=CKV_AZURE_80: .NET Framework does not apply to a Python app, nor to an authsettingsV2 config child.
  // checkov:skip=CKV_AZURE_88: Azure Files storage mounts are a site property, not part of authsettingsV2; checkov reads this authsettingsV2 config child as a whole web app; the site's own setting is on functionApp above.
  // checkov:skip=CKV_AZURE_65: Detailed error messages are a site logging setting, not part of authsettingsV2; checkov reads this authsettingsV2 config child as a whole web app; the site's own setting is on functionApp above.
  parent: functionApp
  name: 'authsettingsV2'
  properties: {
    platform: {
      enabled: true
    }
    globalValidation: {
      requireAuthentication: true
      unauthenticatedClientAction: 'Return401'
      excludedPaths: [
        '/api/health'
      ]
    }
    identityProviders: {
      azureActiveDirectory: {
        enabled: true
        registration: {
          clientId: authClientId
          openIdIssuer: '${environment().authentication.loginEndpoint}${authTenantId}/v2.0'
        }
        validation: {
          allowedAudiences: [
            'api://${authClientId}'
            authClientId
          ]
        }
      }
    }
    login: {
      tokenStore: {
        enabled: false
      }
    }
    httpSettings: {
      requireHttps: true
    }
  }
}

