/**
 * The process entry. In a container Node runs as PID 1, which ignores any signal it has no
 * handler for, and loading the service takes about a second: so the first thing this does is
 * handle SIGTERM/SIGINT. Until the service's own drain handlers take over, a signal ends the
 * process at once (nothing has been served or acknowledged yet).
 */
function stopDuringStartUp(signal: NodeJS.Signals): void {
  process.stderr.write(`agentforest: ${signal} during start-up; exiting before serving\n`);
  process.exit(0);
}
process.once('SIGTERM', stopDuringStartUp);
process.once('SIGINT', stopDuringStartUp);

try {
  const { start } = await import('./start.js');
  await start({
    onSignalsHandled: () => {
      process.off('SIGTERM', stopDuringStartUp);
      process.off('SIGINT', stopDuringStartUp);
    },
  });
} catch (error) {
  process.stderr.write(`agentforest: failed to start: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
}
