#!/usr/bin/env node
// The `tollgate-gateway` bin. Everything is in cli.ts; this file only runs it (see `--help`).
// What the gateway loads may be missing from a broken or hand-assembled install (its dependencies:
// ioredis, pino, prom-client, undici, yaml, zod). Then the bin says which are missing and how to
// install them, instead of a stack trace.
import { missingPackageOf, missingPackages, missingPackagesMessage } from './missing-packages.js'

let cli: typeof import('./cli.js')
try {
  cli = await import('./cli.js')
} catch (error) {
  const missing = missingPackageOf(error)
  if (missing === undefined) throw error
  const all = await missingPackages(missing)
  process.stderr.write(
    missingPackagesMessage(all, { bin: process.argv[1], userAgent: process.env.npm_config_user_agent }),
  )
  process.exit(1)
}
await cli.runCli(process.argv.slice(2))
