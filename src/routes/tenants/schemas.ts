/**
 * Schemas of the tenant operations (admin keys only).
 */
import { Type, type Static } from '@sinclair/typebox';
import { TENANT_ID_PATTERN } from '../../domain/tenants.js';

const whole = (description: string) => Type.Optional(Type.Integer({ minimum: 0, description }));

export const Quotas = Type.Object(
  {
    maxLiveAgents: whole('Agents live at once (roots and resident children), on all instances together.'),
    maxRoots: whole('Roots that exist (made and not disposed; a disposed root no longer counts).'),
    stepsPerMinute: whole('Steps handed out per minute (a fixed UTC minute).'),
    tokensPerDay: whole('Model tokens (input and output) spent per UTC day.'),
    costMicroUsdPerDay: whole('Cost spent per UTC day, in millionths of a US dollar.'),
  },
  { additionalProperties: false, description: 'Each optional: absent means no limit.' },
);

const fields = {
  name: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
  quotas: Type.Optional(Quotas),
  modelKeyEnvs: Type.Optional(
    Type.Array(Type.String({ pattern: '^[A-Za-z_][A-Za-z0-9_]*_API_KEY$', maxLength: 200 }), {
      maxItems: 50,
      uniqueItems: true,
      description:
        "The model key variables this tenant's driven agents (and tool servers) may name; no other tenant's agent may name them. " +
        'Names ending in `_API_KEY`, not starting with `AGENTFOREST_`: no other variable of the service is ever lent.',
    }),
  ),
};

export const TenantParams = Type.Object({ id: Type.String({ pattern: TENANT_ID_PATTERN, description: 'Lowercase letters, digits and `-`, at most 63.' }) });
export const KeyParams = Type.Object({ id: TenantParams.properties.id, keyId: Type.String({ minLength: 1, maxLength: 64 }) });

export const TenantBody = Type.Object({ id: TenantParams.properties.id, ...fields }, { additionalProperties: false });
export const TenantChange = Type.Object(fields, { additionalProperties: false, description: 'Each field given replaces the one stored (`quotas` as a whole).' });

export const TenantView = Type.Object(
  { id: Type.String(), ...fields, createdAt: Type.String({ format: 'date-time' }), updatedAt: Type.String({ format: 'date-time' }) },
  { additionalProperties: false },
);
export type TenantView = Static<typeof TenantView>;

const count = (description: string) => Type.Integer({ minimum: 0, description });

export const TenantWithUsage = Type.Object(
  {
    ...TenantView.properties,
    usage: Type.Object(
      {
        liveAgents: count('Live agents (roots and resident children).'),
        liveRoots: count('Live roots.'),
        steps: count('Steps handed out in the current UTC minute.'),
        tokens: count('Model tokens spent in the current UTC day.'),
        costMicroUsd: Type.Number({ minimum: 0, description: 'Spent in the current UTC day, in millionths of a US dollar.' }),
      },
      { additionalProperties: false },
    ),
  },
  { additionalProperties: false },
);

export const TenantList = Type.Object({ items: Type.Array(TenantView) }, { additionalProperties: false });

export const KeyCreated = Type.Object(
  {
    keyId: Type.String(),
    key: Type.String({ description: 'Shown this once: only its hash is stored. Send it as `Authorization: Bearer <key>`.' }),
    createdAt: Type.String({ format: 'date-time' }),
  },
  { additionalProperties: false },
);

export const KeyList = Type.Object(
  { items: Type.Array(Type.Object({ keyId: Type.String(), createdAt: Type.String({ format: 'date-time' }) }, { additionalProperties: false })) },
  { additionalProperties: false },
);
