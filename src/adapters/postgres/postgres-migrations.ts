/**
 * Schema migrations for the PostgreSQL store, applied in order, each in one transaction, under
 * an advisory lock so instances starting together migrate once. The schema mirrors the SQLite
 * store's at its version 3 (sessions, entries with forest order, pending rows, idempotency);
 * forest leases and the cluster's package configuration exist only here.
 */
import type { Migration } from '../migration.js';
import { POSTGRES_APPROVAL_TABLES } from './postgres-approvals.js';
import { POSTGRES_PROVIDER_LIMIT_TABLES, POSTGRES_TENANT_USAGE_TABLES } from './postgres-usage.js';
import { POSTGRES_SETTING_TABLES } from './postgres-settings.js';
import { POSTGRES_WEBHOOK_TABLES, POSTGRES_WEBHOOK_TENANTS } from './postgres-webhooks.js';

export const POSTGRES_MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    description: 'sessions, append-only entries in session and forest order, pending rows, idempotency keys',
    sql: `
      CREATE TABLE sessions (
        id             TEXT PRIMARY KEY,
        kind           TEXT NOT NULL,
        parent_session TEXT,
        created_at     TEXT NOT NULL,
        header         TEXT NOT NULL,
        last_seq       BIGINT NOT NULL DEFAULT 0
      );
      CREATE INDEX sessions_parent ON sessions (parent_session, created_at, id);
      CREATE TABLE entries (
        session_id TEXT NOT NULL,
        seq        BIGINT NOT NULL,
        type       TEXT NOT NULL,
        body       TEXT NOT NULL,
        message_id TEXT,
        turn_id    TEXT,
        root_id    TEXT NOT NULL,
        forest_seq BIGINT NOT NULL,
        PRIMARY KEY (session_id, seq)
      );
      CREATE INDEX entries_turn_boundaries ON entries (session_id, seq) WHERE type IN ('turn-start', 'turn-end');
      CREATE INDEX entries_activations ON entries (session_id, seq) WHERE type = 'activation';
      CREATE INDEX entries_message ON entries (message_id) WHERE message_id IS NOT NULL;
      CREATE INDEX entries_turn ON entries (session_id, turn_id) WHERE turn_id IS NOT NULL;
      CREATE UNIQUE INDEX entries_forest ON entries (root_id, forest_seq);
      CREATE TABLE pending (
        session_id  TEXT NOT NULL,
        message_id  TEXT NOT NULL,
        position    BIGINT NOT NULL,
        kind        TEXT NOT NULL,
        item_id     TEXT,
        message     TEXT NOT NULL,
        accepted_at TEXT NOT NULL,
        PRIMARY KEY (session_id, message_id)
      );
      CREATE INDEX pending_order ON pending (session_id, position);
      CREATE INDEX pending_message ON pending (message_id);
      CREATE TABLE idempotency (
        sender      TEXT NOT NULL,
        key         TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        status      INTEGER NOT NULL,
        response    TEXT NOT NULL,
        created_at  BIGINT NOT NULL,
        expires_at  BIGINT NOT NULL,
        PRIMARY KEY (sender, key)
      );
      CREATE INDEX idempotency_expiry ON idempotency (expires_at);
    `,
  },
  {
    version: 2,
    description: 'forest leases: which instance owns a forest, until when, under which fencing epoch',
    sql: `
      CREATE TABLE forest_leases (
        root_id    TEXT PRIMARY KEY,
        owner      TEXT NOT NULL,
        owner_url  TEXT NOT NULL,
        epoch      BIGINT NOT NULL,
        expires_at TIMESTAMPTZ NOT NULL
      );
    `,
  },
  {
    version: 3,
    description: 'compaction entries found by session through an index of their own',
    sql: `
      CREATE INDEX entries_compactions ON entries (session_id, seq) WHERE type = 'compaction';
    `,
  },
  {
    version: 4,
    description: 'the cluster package configuration (one versioned row) and the version each instance applied',
    sql: `
      CREATE TABLE cluster_packages (
        id           SMALLINT PRIMARY KEY CHECK (id = 1),
        version      BIGINT NOT NULL,
        report_fence BIGINT NOT NULL,
        state        TEXT NOT NULL,
        changed_at   TIMESTAMPTZ NOT NULL
      );
      CREATE TABLE cluster_instances (
        instance_id     TEXT PRIMARY KEY,
        url             TEXT NOT NULL,
        applied_version BIGINT NOT NULL,
        seen_at         TIMESTAMPTZ NOT NULL
      );
    `,
  },
  {
    version: 5,
    description: 'webhook subscriptions and the outbox of their deliveries',
    sql: POSTGRES_WEBHOOK_TABLES,
  },
  {
    version: 6,
    description: 'root sessions in byte order of creation time, then id: the keyset pages of the roots to resume',
    sql: `
      CREATE INDEX sessions_roots ON sessions (created_at COLLATE "C", id COLLATE "C") WHERE parent_session IS NULL;
    `,
  },
  {
    version: 7,
    description: 'operator settings: named JSON documents by kind (tool servers, backend tools)',
    sql: POSTGRES_SETTING_TABLES,
  },
  {
    version: 8,
    description: "the approvals index: every approval's last entry, for the inbox across forests",
    sql: POSTGRES_APPROVAL_TABLES,
  },
  {
    version: 9,
    description: 'tenant usage: what each instance spent for each tenant in the current windows, for the quotas',
    sql: POSTGRES_TENANT_USAGE_TABLES,
  },
  {
    version: 10,
    description: "a webhook subscription's tenant: only its tenant's forests' events match it",
    sql: POSTGRES_WEBHOOK_TENANTS,
  },
  {
    version: 11,
    description: "model providers' back-offs and each instance's requests and tokens per provider in the current minute",
    sql: POSTGRES_PROVIDER_LIMIT_TABLES,
  },
];

export const POSTGRES_LATEST_VERSION = POSTGRES_MIGRATIONS[POSTGRES_MIGRATIONS.length - 1]!.version;
