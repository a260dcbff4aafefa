/**
 * Package routes: list, install or reconfigure, uninstall the service-owned tool packages.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { PackageManager } from '../../services/packages/package-manager.js';
import { EmptyBody, errorResponses, OPERATOR_SECURITY } from '../common-schemas.js';
import { PackageView, ref } from '../../contract/index.js';
import { InstallBody, PackageList, PackageParams } from './schemas.js';

export const packageRoutes: FastifyPluginAsyncTypebox<{ packages: PackageManager }> = async (app, { packages }) => {
  app.get('/v1/packages', {
    schema: {
      tags: ['packages'],
      operationId: 'listPackages',
      summary: 'Installed packages and their config',
      security: OPERATOR_SECURITY,
      response: { 200: PackageList, ...errorResponses([], { bodyless: true }) },
    },
  }, async () => ({ packages: packages.list() }));

  app.put('/v1/packages/:name', {
    schema: {
      tags: ['packages'],
      operationId: 'installPackage',
      summary: 'Install or reconfigure a package',
      description:
        'Installing and `reportDelivery` apply to the next Activation: a resident child keeps the report tool and delivery mode it was set up with. ' +
        '`settlementNotices` applies at once, to the next turn end of any continuable child.',
      security: OPERATOR_SECURITY,
      params: PackageParams,
      body: InstallBody,
      response: { 200: ref(PackageView), ...errorResponses(['PACKAGE_NOT_FOUND']) },
    },
  }, async (request) => packages.install(request.params.name, request.body.config ?? {}));

  app.delete('/v1/packages/:name', {
    schema: {
      tags: ['packages'],
      operationId: 'uninstallPackage',
      summary: 'Uninstall a package',
      description: 'Global tools vanish for every agent at once; a child-scoped tool is revoked from resident children at once, and settlement notices stop.',
      security: OPERATOR_SECURITY,
      params: PackageParams,
      body: EmptyBody,
      response: { 200: ref(PackageView), ...errorResponses(['PACKAGE_NOT_FOUND', 'ACTIVATION_SETUP_RELEASE_FAILED']) },
    },
  }, async (request) => packages.uninstall(request.params.name));
};
