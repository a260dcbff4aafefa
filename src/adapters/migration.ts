/** One schema version of a SQL store: the statements that reach it from the one before. */
export interface Migration {
  version: number;
  description: string;
  sql: string;
}
