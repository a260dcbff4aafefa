/**
 * One transaction on one pooled connection. While the connection is checked out, the pool no
 * longer listens for its errors: a server that ends the connection between two statements (a
 * shutdown, a restart) would then be an uncaught 'error' that stops the process. The
 * transaction listens itself, and a connection that failed is discarded, not pooled again.
 */
import type pg from 'pg';
import { postgresUnavailable } from './postgres-outages.js';

export async function inTransaction<T>(pool: pg.Pool, work: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  let broken: Error | undefined;
  const onError = (error: Error): void => {
    broken ??= error;
  };
  client.on('error', onError);
  try {
    await client.query('BEGIN');
    const result = await work(client);
    await client.query('COMMIT');
    return result;
  } catch (error) {
    if (postgresUnavailable(error)) broken ??= error as Error;
    if (broken === undefined) await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  } finally {
    client.off('error', onError);
    client.release(broken);
  }
}
