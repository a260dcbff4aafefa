/**
 * The admission gate: whether this instance still admits new work. Draining starts once and
 * never ends; from then on every creation, resume, delivery, child start and step claim is
 * refused with DRAINING, readiness fails, and the subscribers of the `draining` service event
 * (the dispatcher's long-polls, the event streams) answer what is open.
 *
 * It is the first object the service layer builds: whoever asks `draining` is given this gate.
 */
import { MESSAGES, ServiceError } from '../domain/errors.js';
import type { ServiceEvents } from '../composition/service-events.js';

export class AdmissionGate {
  private drainStarted = false;

  constructor(private readonly events?: ServiceEvents) {}

  get draining(): boolean {
    return this.drainStarted;
  }

  /** Stop admitting work: readiness fails, open long-polls answer with no step. */
  startDrain(): void {
    if (this.drainStarted) return;
    this.drainStarted = true;
    this.events?.emit('draining');
  }

  /** Throws DRAINING once draining started; `message` says what drains (the service, unless it is about subagents). */
  admitNewWork(message: string = MESSAGES.serviceDraining): void {
    if (this.drainStarted) throw new ServiceError('DRAINING', message);
  }
}
