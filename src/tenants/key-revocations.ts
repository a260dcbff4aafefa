/**
 * What ends when a tenant key is revoked: every request still open with it (an event stream, a
 * long-poll for a step or a tool call) holds the key's signal, which aborts at the revocation,
 * here or, followed from another instance, there. One signal per key, made when first asked for.
 */
export class KeyRevocations {
  private readonly controllers = new Map<string, AbortController>();

  /** Aborts when the key is revoked. */
  signalFor(keyId: string): AbortSignal {
    let controller = this.controllers.get(keyId);
    if (controller === undefined) this.controllers.set(keyId, (controller = new AbortController()));
    return controller.signal;
  }

  /** The keys were revoked (or their tenant deleted): end what is open with them. */
  revoke(keyIds: Iterable<string>): void {
    for (const keyId of keyIds) {
      this.controllers.get(keyId)?.abort();
      this.controllers.delete(keyId);
    }
  }
}
