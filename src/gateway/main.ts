#!/usr/bin/env node
// The `tollgate` bin. Everything is in cli.ts; this file only runs it (see `tollgate --help`).
// The gateway's own dependencies (pino, prom-client, undici, yaml, zod) are optionalDependencies:
// installed by default, left out by `npm install --omit=optional` for a library-only footprint. Then
// the bin says what is missing instead of a stack trace.
const GATEWAY_DEPENDENCIES = ['pino', 'prom-client', 'undici', 'yaml', 'zod']

let cli: typeof import('./cli.js')
try {
  cli = await import('./cli.js')
} catch (error) {
  const missing = /Cannot find (?:package|module) '([^']+)'/.exec(String((error as Error)?.message))?.[1]
  if ((error as NodeJS.ErrnoException)?.code !== 'ERR_MODULE_NOT_FOUND' || !missing) throw error
  process.stderr.write(
    `tollgate: the gateway needs ${missing}, which is not installed (installed with --omit=optional?).\n` +
      `tollgate: install its dependencies: npm install ${GATEWAY_DEPENDENCIES.join(' ')}\n`,
  )
  process.exit(1)
}
await cli.runCli(process.argv.slice(2))
