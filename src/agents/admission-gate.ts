/**
 * The admission gate: whether this instance still admits new work. Draining starts once and
 * never ends; from then on every creation, resume, delivery, child start and step claim is
 * refused with DRAINING, readiness fails, and what is open is answered (the dispatcher's
 * long-polls, the event streams: see onDrain).
 *
 * It is the first object the service layer builds: whoever asks `draining` is given this gate.
 */
import { MESSAGES, ServiceError } from '../domain/errors.js';

export class AdmissionGate {
  private drainStarted = false;

  /** `onDrain`: told once, when draining starts (the dispatcher's long-polls, the event streams). */
  constructor(private readonly onDrain: () => void = () => undefined) {}

  get draining(): boolean {
    return this.drainStarted;
  }

  /** Stop admitting work: readiness fails, open long-polls answer with no step. */
  startDrain(): void {
    if (this.drainStarted) return;
    this.drainStarted = true;
    this.onDrain();
  }

  /** Throws DRAINING once draining started; `message` says what drains (the service, unless it is about subagents). */
  admitNewWork(message: string = MESSAGES.serviceDraining): void {
    if (this.drainStarted) throw new ServiceError('DRAINING', message);
  }
}
