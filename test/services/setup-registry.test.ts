/**
 * ActivationSetupRegistry on its own: registration order, the
 * provisional batch and its AgentSetupCommit, idempotent removal and scope release, rollback
 * of a failing apply, and the aggregate ACTIVATION_SETUP_RELEASE_FAILED error. Scopes are plain
 * objects; every contribution returns a disposer that records its call into `released`.
 */
import { describe, expect, it } from 'vitest';
import { ServiceError } from '../../src/domain/errors.js';
import { ActivationSetupRegistry, REVOKED_MESSAGE, type SetupContribution } from '../../src/children/setup-registry.js';

interface Scope {
  name: string;
  installed: string[];
}

const REVOKED_TEXT =
  'a continuable-subagent setup contribution was revoked while this child was being built; the child was not established';

function scope(name: string): Scope {
  return { name, installed: [] };
}

/** A registry plus the shared log of disposer calls, as `<contribution>@<scope>`. */
function fixture() {
  const registry = new ActivationSetupRegistry<Scope>();
  const released: string[] = [];
  /** A contribution that marks the scope as installed and records its disposal. */
  const contribution = (label: string, onDispose?: () => void): SetupContribution<Scope> =>
    (target) => {
      target.installed.push(label);
      return () => {
        released.push(`${label}@${target.name}`);
        onDispose?.();
      };
    };
  return { registry, released, contribution };
}

/** Runs `act`, requires it to throw a ServiceError, and returns that error. */
function serviceErrorOf(act: () => unknown): ServiceError {
  let caught: unknown;
  try {
    act();
  } catch (error) {
    caught = error;
  }
  expect(caught).toBeInstanceOf(ServiceError);
  return caught as ServiceError;
}

describe('ActivationSetupRegistry', () => {
  it('two contributions install in registration order, and commit() succeeds without disposing anything', () => {
    const { registry, released, contribution } = fixture();
    registry.register(contribution('a'));
    registry.register(contribution('b'));
    const child = scope('c1');

    const setup = registry.apply(child);
    expect(child.installed).toEqual(['a', 'b']);

    expect(() => setup.commit()).not.toThrow();
    expect(released).toEqual([]);
    expect(child.installed).toEqual(['a', 'b']);
  });

  it('removing a contribution twice and then closing the child calls its disposer exactly once', () => {
    const { registry, released, contribution } = fixture();
    const remove = registry.register(contribution('a'));
    const child = scope('c1');
    registry.apply(child).commit();

    remove();
    remove();
    registry.releaseScope(child);

    expect(released).toEqual(['a@c1']);
    expect(registry.size).toBe(0);
  });

  it('closing the child and then removing the contribution calls its disposer exactly once', () => {
    const { registry, released, contribution } = fixture();
    const remove = registry.register(contribution('a'));
    const child = scope('c1');
    registry.apply(child).commit();

    registry.releaseScope(child);
    expect(released).toEqual(['a@c1']);
    remove();

    expect(released).toEqual(['a@c1']);
  });

  it('a contribution removed before apply is skipped while the others install', () => {
    const { registry, released, contribution } = fixture();
    registry.register(contribution('a'));
    const removeB = registry.register(contribution('b'));
    registry.register(contribution('c'));
    removeB();
    const child = scope('c1');

    const setup = registry.apply(child);
    expect(child.installed).toEqual(['a', 'c']);
    expect(() => setup.commit()).not.toThrow();
    expect(released).toEqual([]);
  });

  it('apply, then remove before commit disposes once and commit throws revoked', () => {
    const { registry, released, contribution } = fixture();
    const remove = registry.register(contribution('a'));
    const child = scope('c1');
    const setup = registry.apply(child);

    remove();
    expect(released).toEqual(['a@c1']);

    const error = serviceErrorOf(() => setup.commit());
    expect(error.code).toBe('ACTIVATION_SETUP_REVOKED');
    expect(error.message).toBe(REVOKED_TEXT);
    expect(error.message).toMatch(/revoked while this child was being built/);
    expect(REVOKED_MESSAGE).toBe(REVOKED_TEXT);

    // The caller's rollback releases the scope; the disposer does not run a second time.
    registry.releaseScope(child);
    expect(released).toEqual(['a@c1']);
  });

  it('a removal that lands on a microtask between apply and commit still makes commit throw revoked', async () => {
    const { registry, released, contribution } = fixture();
    const remove = registry.register(contribution('a'));
    const child = scope('c1');
    const setup = registry.apply(child);

    queueMicrotask(remove);
    await Promise.resolve();

    expect(released).toEqual(['a@c1']);
    expect(serviceErrorOf(() => setup.commit()).code).toBe('ACTIVATION_SETUP_REVOKED');
  });

  it('an installer that removes its own registration is disposed once and commit throws revoked', () => {
    const { registry, released } = fixture();
    const remove: () => void = registry.register((target) => {
      target.installed.push('self');
      remove();
      return () => {
        released.push(`self@${target.name}`);
      };
    });
    const child = scope('c1');

    const setup = registry.apply(child);
    expect(released).toEqual(['self@c1']);
    expect(registry.size).toBe(0);

    const error = serviceErrorOf(() => setup.commit());
    expect(error.code).toBe('ACTIVATION_SETUP_REVOKED');
    expect(error.message).toMatch(/revoked/);

    registry.releaseScope(child);
    expect(released).toEqual(['self@c1']);
  });

  it('removal across three children where the first disposer throws releases all three in order and throws the aggregate', () => {
    const { registry, released } = fixture();
    const boom = new Error('disposer c1 failed');
    const remove = registry.register((target) => () => {
      released.push(target.name);
      if (target.name === 'c1') throw boom;
    });
    for (const name of ['c1', 'c2', 'c3']) registry.apply(scope(name)).commit();

    const error = serviceErrorOf(remove);
    expect(error.code).toBe('ACTIVATION_SETUP_RELEASE_FAILED');
    expect(error.message).toMatch(/continuable-subagent setup contribution removal failed to release 1 installation\(s\)/);
    expect(error.message).toBe('continuable-subagent setup contribution removal failed to release 1 installation(s): disposer c1 failed');
    expect(error.cause).toBe(boom);
    expect(released).toEqual(['c1', 'c2', 'c3']);

    // The registration is gone and every installation was released: nothing runs again.
    expect(registry.size).toBe(0);
    expect(() => remove()).not.toThrow();
    expect(released).toEqual(['c1', 'c2', 'c3']);
  });

  it('closing a child where the first of two disposers throws still releases both, in order, and throws the aggregate', () => {
    const { registry, released } = fixture();
    registry.register(() => () => {
      released.push('a');
      throw new Error('a failed');
    });
    registry.register(() => () => {
      released.push('b');
    });
    const child = scope('c1');
    registry.apply(child).commit();

    const error = serviceErrorOf(() => registry.releaseScope(child));
    expect(error.code).toBe('ACTIVATION_SETUP_RELEASE_FAILED');
    expect(error.message).toMatch(/continuable-subagent setup child scope disposal failed to release 1 installation\(s\)/);
    expect(error.message).toBe('continuable-subagent setup child scope disposal failed to release 1 installation(s): a failed');
    expect(released).toEqual(['a', 'b']);
  });

  it('when both disposers of a closing child throw, the aggregate names both failures and their chains', () => {
    const { registry, released } = fixture();
    registry.register(() => () => {
      released.push('a');
      throw new Error('a failed', { cause: new Error('disk gone') });
    });
    registry.register(() => () => {
      released.push('b');
      throw new Error('b failed');
    });
    const child = scope('c1');
    registry.apply(child).commit();

    const error = serviceErrorOf(() => registry.releaseScope(child));
    expect(error.code).toBe('ACTIVATION_SETUP_RELEASE_FAILED');
    expect(error.message).toBe(
      'continuable-subagent setup child scope disposal failed to release 2 installation(s): a failed <- disk gone; b failed',
    );
    expect(error.cause).toBeInstanceOf(AggregateError);
    expect(released).toEqual(['a', 'b']);
  });

  it('when the second of three installers throws, apply rethrows it, undoes only the first and never installs the third', () => {
    const { registry, released, contribution } = fixture();
    const boom = new Error('boom');
    let thirdCalls = 0;
    registry.register(contribution('a'));
    registry.register(() => {
      throw boom;
    });
    registry.register((target) => {
      thirdCalls++;
      target.installed.push('c');
      return () => released.push(`c@${target.name}`);
    });
    const child = scope('c1');

    expect(() => registry.apply(child)).toThrow(boom);
    expect(released).toEqual(['a@c1']);
    expect(thirdCalls).toBe(0);
    expect(child.installed).toEqual(['a']);

    // The rolled-back installation is not released again when the scope closes.
    registry.releaseScope(child);
    expect(released).toEqual(['a@c1']);
  });

  it('a disposer that throws during the rollback is swallowed and apply rethrows the original error', () => {
    const { registry, released } = fixture();
    const boom = new Error('boom');
    registry.register(() => () => {
      released.push('a');
      throw new Error('rollback failed');
    });
    registry.register(() => {
      throw boom;
    });

    expect(() => registry.apply(scope('c1'))).toThrow(boom);
    expect(released).toEqual(['a']);
  });

  it('when the second installer removes the first and then throws, the first is disposed exactly once', () => {
    const { registry, released, contribution } = fixture();
    const boom = new Error('boom');
    const removeFirst = registry.register(contribution('a'));
    registry.register(() => {
      removeFirst();
      throw boom;
    });
    const child = scope('c1');

    expect(() => registry.apply(child)).toThrow(boom);
    expect(released).toEqual(['a@c1']);

    registry.releaseScope(child);
    removeFirst();
    expect(released).toEqual(['a@c1']);
  });

  it('with two children, closing one releases only its own installation', () => {
    const { registry, released, contribution } = fixture();
    registry.register(contribution('a'));
    const first = scope('c1');
    const second = scope('c2');
    registry.apply(first).commit();
    registry.apply(second).commit();

    registry.releaseScope(first);
    expect(released).toEqual(['a@c1']);

    registry.releaseScope(second);
    expect(released).toEqual(['a@c1', 'a@c2']);
  });

  it('releasing a child scope twice disposes its installations once', () => {
    const { registry, released, contribution } = fixture();
    registry.register(contribution('a'));
    registry.register(contribution('b'));
    const child = scope('c1');
    registry.apply(child).commit();

    registry.releaseScope(child);
    registry.releaseScope(child);

    expect(released).toEqual(['a@c1', 'b@c1']);
  });

  it('removal after commit is live revocation: the disposer runs at once and the committed child stays committed', () => {
    const { registry, released, contribution } = fixture();
    const remove = registry.register(contribution('a'));
    const child = scope('c1');
    const setup = registry.apply(child);
    setup.commit();

    remove();

    expect(released).toEqual(['a@c1']);
    expect(() => setup.commit()).not.toThrow();
  });

  it('releasing an uncommitted scope (a rollback) invalidates its commit', () => {
    const { registry, released, contribution } = fixture();
    registry.register(contribution('a'));
    const child = scope('c1');
    const setup = registry.apply(child);

    registry.releaseScope(child);

    expect(released).toEqual(['a@c1']);
    expect(serviceErrorOf(() => setup.commit()).code).toBe('ACTIVATION_SETUP_REVOKED');
  });

  it('a contribution registered after apply does not install into that scope, only into the next one', () => {
    const { registry, released, contribution } = fixture();
    registry.register(contribution('a'));
    const first = scope('c1');
    const setup = registry.apply(first);
    registry.register(contribution('late'));

    expect(() => setup.commit()).not.toThrow();
    expect(first.installed).toEqual(['a']);

    const second = scope('c2');
    registry.apply(second).commit();
    expect(second.installed).toEqual(['a', 'late']);

    registry.releaseScope(first);
    expect(released).toEqual(['a@c1']);
  });

  it('a contribution removed by an earlier installer during apply is never installed', () => {
    const { registry, released, contribution } = fixture();
    let removeSecond: () => void = () => undefined;
    registry.register((target) => {
      target.installed.push('a');
      removeSecond();
      return () => released.push(`a@${target.name}`);
    });
    removeSecond = registry.register(contribution('b'));
    const child = scope('c1');

    const setup = registry.apply(child);

    expect(child.installed).toEqual(['a']);
    expect(() => setup.commit()).not.toThrow();
    expect(released).toEqual([]);
  });
});
