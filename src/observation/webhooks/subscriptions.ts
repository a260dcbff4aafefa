/**
 * Webhook subscriptions, as the operator manages them: create (the URL checked, the secret
 * generated or parsed), list, delete, and a subscription's deliveries and their retry. Every
 * change is a WebhookChange in the session log's next batch, answered once it is durable.
 *
 * A subscription made with a tenant key is that tenant's (`tenantId`): listed to that tenant
 * and admins only, and matched by the store only against the events of that tenant's forests
 * (outbox.ts), `rootId` included: naming another tenant's root is accepted as naming an unknown
 * one is (nothing tells the two apart) and never matches. Its URL always passes the address
 * guard (here, and at every delivery: delivery-worker.ts): only an admin may point the service
 * at its own network, so AGENTFOREST_WEBHOOK_ALLOW_PRIVATE is an admin's alone. One made with
 * an admin key is global: every forest's events, listed to admins only.
 *
 * The subscriptions are also kept in memory here, to tell which events anyone wants (the
 * Interest of webhook-events.ts): exact with one instance, where every change passes here.
 * With several instances `exact` is false, and every event goes to the store to match. A
 * tenant's subscription counts here as wanting its events of every forest (or of its root):
 * the forest's tenant is the store's to match.
 */
import { ServiceError } from '../../domain/errors.js';
import type { Clock, IdSource } from '../../domain/ports.js';
import { ownerFor, sees, type Principal } from '../../domain/tenants.js';
import type { SessionLog } from '../../sessions/session-log.js';
import type { Delivery, DeliveryQuery, WebhookEventType, WebhookReads, WebhookSubscription } from '../../sessions/outbox.js';
import { parseWebhookUrl, resolvePublic, WebhookAddressError } from './address-guard.js';
import { generateSecret, parseSecret } from './signing.js';

export interface NewSubscription {
  url: string;
  events: readonly WebhookEventType[];
  rootId?: string | undefined;
  secret?: string | undefined;
}

/** A subscription as listed: never its secret. */
export type SubscriptionView = Omit<WebhookSubscription, 'secret'>;

export interface SubscriptionDeps {
  log: SessionLog;
  reads: WebhookReads;
  clock: Clock;
  ids: IdSource;
  /** Loopback, link-local and private destinations are allowed to an admin (self-hosted setups, tests). */
  allowPrivate: boolean;
  /** And to a tenant (tests only): otherwise a tenant's URL passes the address guard, whatever `allowPrivate` says. */
  tenantPrivateAddresses: boolean;
  /** Whether every subscription change passes through this instance (one instance). */
  exact: boolean;
}

export class WebhookSubscriptions {
  /** Event types wanted, per forest ('' for every forest); undefined until loaded. */
  private wanted: Map<string, Set<WebhookEventType>> | undefined;

  constructor(private readonly deps: SubscriptionDeps) {}

  /** Read the subscriptions into memory (at start; until then every event is queued). */
  async load(): Promise<void> {
    if (!this.deps.exact) return;
    const subs = await this.deps.reads.subscriptions();
    this.wanted = new Map();
    for (const sub of subs) this.want(sub);
  }

  /** Whether some subscription may want this event (see webhook-events.ts). */
  readonly interested = (type: WebhookEventType, rootId: string): boolean => {
    const wanted = this.wanted;
    if (wanted === undefined) return true;
    return wanted.get('')?.has(type) === true || wanted.get(rootId)?.has(type) === true;
  };

  /** A subscription owned by `principal`'s tenant, or global when it is an admin. */
  async create(principal: Principal, input: NewSubscription): Promise<WebhookSubscription> {
    const tenantId = ownerFor(principal);
    const url = await this.checkUrl(input.url, tenantId === undefined ? this.deps.allowPrivate : this.deps.tenantPrivateAddresses);
    let secret = input.secret;
    if (secret === undefined) secret = generateSecret();
    else {
      try {
        parseSecret(secret);
      } catch (error) {
        throw new ServiceError('VALIDATION', error instanceof Error ? error.message : 'the webhook secret is malformed');
      }
    }
    const subscription: WebhookSubscription = {
      id: this.deps.ids.next('webhook'),
      url: url.href,
      events: [...new Set(input.events)],
      rootId: input.rootId ?? null,
      ...(tenantId === undefined ? {} : { tenantId }),
      secret,
      createdAt: this.deps.clock.now(),
    };
    this.deps.log.changeWebhooks({ op: 'subscribe', subscription });
    // Wanted from now on: an event queued before the write commits may then match it, never miss it.
    this.want(subscription);
    await this.deps.log.durable();
    return subscription;
  }

  /** Who subscribed: `{owner}` for a tenant's subscription, `{}` for a global one, undefined when none has the id. */
  async ownerOf(id: string): Promise<{ owner?: string } | undefined> {
    await this.deps.log.settled();
    const sub = await this.deps.reads.subscription(id);
    if (sub === undefined) return undefined;
    return sub.tenantId === undefined ? {} : { owner: sub.tenantId };
  }

  /** The subscriptions `principal` sees: an admin every one, a tenant its own (never the global ones). */
  async list(principal: Principal): Promise<SubscriptionView[]> {
    await this.deps.log.settled();
    return (await this.deps.reads.subscriptions()).filter((sub) => sees(principal, sub.tenantId, false)).map(viewOf);
  }

  async get(id: string): Promise<SubscriptionView> {
    return viewOf(await this.require(id));
  }

  async remove(id: string): Promise<void> {
    await this.require(id);
    this.deps.log.changeWebhooks({ op: 'unsubscribe', webhookId: id });
    await this.deps.log.durable();
    if (this.wanted !== undefined) await this.load();
  }

  async deliveries(id: string, query: DeliveryQuery): Promise<Delivery[]> {
    await this.require(id);
    return this.deps.reads.deliveries(id, query);
  }

  /** Send a delivery again now, whatever its state; the next attempt starts a new retry window. */
  async retry(id: string, deliveryId: string): Promise<Delivery> {
    await this.require(id);
    const delivery = await this.deps.reads.delivery(id, deliveryId);
    if (delivery === undefined) throw new ServiceError('DELIVERY_NOT_FOUND', `webhook "${id}" has no delivery "${deliveryId}"`);
    this.deps.log.changeWebhooks({ op: 'retry', webhookId: id, eventId: deliveryId, rootId: delivery.rootId, at: this.deps.clock.now() });
    await this.deps.log.durable(delivery.rootId);
    return (await this.deps.reads.delivery(id, deliveryId)) ?? delivery;
  }

  private async require(id: string): Promise<WebhookSubscription> {
    await this.deps.log.settled();
    const sub = await this.deps.reads.subscription(id);
    if (sub === undefined) throw new ServiceError('WEBHOOK_NOT_FOUND', `webhook "${id}" does not exist`);
    return sub;
  }

  private async checkUrl(raw: string, allowPrivate: boolean): Promise<URL> {
    try {
      const url = parseWebhookUrl(raw);
      await resolvePublic(url.hostname, allowPrivate);
      return url;
    } catch (error) {
      if (error instanceof WebhookAddressError) throw new ServiceError('VALIDATION', `url: ${error.message}`);
      // A name that does not resolve now may later: refuse it, saying so, rather than guess.
      throw new ServiceError('VALIDATION', "url: the webhook URL's host does not resolve");
    }
  }

  private want(sub: Pick<WebhookSubscription, 'rootId' | 'events'>): void {
    if (this.wanted === undefined) return;
    const key = sub.rootId ?? '';
    let set = this.wanted.get(key);
    if (set === undefined) this.wanted.set(key, (set = new Set()));
    for (const type of sub.events) set.add(type);
  }
}

function viewOf({ secret: _secret, ...view }: WebhookSubscription): SubscriptionView {
  return view;
}
