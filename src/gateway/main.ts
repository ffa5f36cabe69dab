#!/usr/bin/env node
// The `tollgate` bin. Everything is in cli.ts; this file only runs it (see `tollgate --help`).
import { runCli } from './cli.js'

await runCli(process.argv.slice(2))
