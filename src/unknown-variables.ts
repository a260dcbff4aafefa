/**
 * Variables that look like settings and are none: an `AGENTFOREST_*` name the configuration
 * does not know is most often a typo (`AGENTFOREST_DRAIN_TIMEOUT` for `..._DRAIN_TIMEOUT_MS`),
 * which would otherwise leave the default in force without a word. Each is named with the
 * closest known name. The project's own tooling variables (tests, benches, the container
 * check) are not settings and are left alone.
 */

const TOOLING = /^AGENTFOREST_(TEST_|BENCH_|CHAOS|CONTAINER_|SCREENSHOTS$)/;

/** One warning per unknown `AGENTFOREST_*` variable set in `env`, in name order. */
export function unknownVariables(env: Record<string, string | undefined>, known: readonly string[]): string[] {
  const knownSet = new Set(known);
  return Object.keys(env)
    .filter((name) => name.startsWith('AGENTFOREST_') && !knownSet.has(name) && !TOOLING.test(name) && env[name] !== undefined)
    .sort()
    .map((name) => {
      const closest = closestName(name, known);
      return `${name} is not a setting of agentforest and is ignored${closest === undefined ? '' : `; did you mean ${closest}?`}`;
    });
}

/** The known name nearest by edit distance, when it is near enough to be a likely typo. */
function closestName(name: string, known: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = Infinity;
  for (const candidate of known) {
    const distance = editDistance(name, candidate);
    if (distance < bestDistance) {
      best = candidate;
      bestDistance = distance;
    }
  }
  return bestDistance <= Math.max(3, Math.floor(name.length / 4)) ? best : undefined;
}

/** Levenshtein distance: insertions, deletions and substitutions of one character each. */
function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      current[j] = Math.min(previous[j]! + 1, current[j - 1]! + 1, previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    previous = current;
  }
  return previous[b.length]!;
}
