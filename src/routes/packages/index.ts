/**
 * Package routes: list, install or reconfigure, uninstall the service-owned tool packages.
 * With several instances on one PostgreSQL database the configuration is the cluster's: a
 * change answers once every instance holding a forest lease applied it, or names those that
 * did not (`unconfirmed`).
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { PackageChanges } from '../../tools/packages/package-changes.js';
import { EmptyBody, errorResponses, OPERATOR_SECURITY } from '../common-schemas.js';
import { PackageChangeView, ref } from '../../contract/index.js';
import { InstallBody, PackageList, PackageParams } from './schemas.js';

const CLUSTER =
  ' With several instances on one PostgreSQL database the change is stored in the database and applied by every instance: the answer comes once ' +
  'every other instance holding a forest lease has applied it, or after AGENTFOREST_CONFIG_CONFIRM_MS, naming in `unconfirmed` the instances ' +
  'that did not; those cannot deliver a report until they catch up.';

export const packageRoutes: FastifyPluginAsyncTypebox<{ packages: PackageChanges }> = async (app, { packages }) => {
  app.get('/v1/packages', {
    schema: {
      tags: ['packages'],
      operationId: 'listPackages',
      summary: 'Installed packages and their config',
      description: 'With several instances on one PostgreSQL database, the configuration this instance has applied: the cluster\'s.',
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
        '`settlementNotices` applies at once, to the next turn end of any continuable child.' + CLUSTER,
      security: OPERATOR_SECURITY,
      params: PackageParams,
      body: InstallBody,
      response: { 200: ref(PackageChangeView), ...errorResponses(['PACKAGE_NOT_FOUND']) },
    },
  }, async (request) => packages.install(request.params.name, request.body.config ?? {}));

  app.delete('/v1/packages/:name', {
    schema: {
      tags: ['packages'],
      operationId: 'uninstallPackage',
      summary: 'Uninstall a package',
      description:
        'Global tools vanish for every agent at once; a child-scoped tool is revoked from resident children at once, and settlement notices stop.' + CLUSTER,
      security: OPERATOR_SECURITY,
      params: PackageParams,
      body: EmptyBody,
      response: { 200: ref(PackageChangeView), ...errorResponses(['PACKAGE_NOT_FOUND', 'ACTIVATION_SETUP_RELEASE_FAILED']) },
    },
  }, async (request) => packages.uninstall(request.params.name));
};
