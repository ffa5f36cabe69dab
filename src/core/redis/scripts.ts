// The Lua of the Redis store, assembled from the embedded lua/ sources in two forms that run the same
// code:
//   - a function library per family (FUNCTION LOAD once per server, then FCALL): the preludes run once
//     at load, so a call pays only for its own script (the default; ~2.4 µs less Redis time a call
//     than an EVAL whose preludes make their helpers again every time, docs/cost.md);
//   - one self-contained script per call (SCRIPT LOAD once per server, then EVALSHA), for a server or
//     user that may not load functions (an ACL without FUNCTION/FCALL, a managed Redis that forbids
//     them).
// Both wrap the script file in a function of (KEYS, ARGV) that starts with its family's begin(), and
// both run through one runner contract (LuaRunner), so the store keeps one reload barrier for both.
import { createHash } from 'node:crypto'
import { type Cluster, type Redis, ReplyError } from 'ioredis'
import { LUA_SOURCES, type LuaFile } from './lua-sources.js'

/** Preludes of each family of scripts, prepended in this order (they declare the helpers and begin()). */
const PRELUDES = {
  permits: ['lib/common.lua', 'lib/permits.lua'],
  rwlock: ['lib/common.lua', 'lib/rwlock.lua'],
  adaptive: ['lib/common.lua', 'lib/adaptive.lua'],
} as const satisfies Record<string, readonly LuaFile[]>

type Family = keyof typeof PRELUDES

/** Every script: command name -> file and prelude family. */
export const SCRIPTS = {
  tgPermitAcquire: { file: 'permit-acquire.lua', numberOfKeys: 7, lib: 'permits' },
  tgPermitRelease: { file: 'permit-release.lua', numberOfKeys: 7, lib: 'permits' },
  tgPermitRenew: { file: 'permit-renew.lua', numberOfKeys: 7, lib: 'permits' },
  tgPermitRecheck: { file: 'permit-recheck.lua', numberOfKeys: 7, lib: 'permits' },
  tgPermitInspect: { file: 'permit-inspect.lua', numberOfKeys: 7, lib: 'permits' },
  tgPermitSetLimit: { file: 'permit-set-limit.lua', numberOfKeys: 7, lib: 'permits' },
  tgRwAcquire: { file: 'rwlock-acquire.lua', numberOfKeys: 6, lib: 'rwlock' },
  tgRwRelease: { file: 'rwlock-release.lua', numberOfKeys: 6, lib: 'rwlock' },
  tgRwRenew: { file: 'rwlock-renew.lua', numberOfKeys: 6, lib: 'rwlock' },
  tgRwRecheck: { file: 'rwlock-recheck.lua', numberOfKeys: 6, lib: 'rwlock' },
  tgRwInspect: { file: 'rwlock-inspect.lua', numberOfKeys: 6, lib: 'rwlock' },
  tgAdaptiveReport: { file: 'adaptive-report.lua', numberOfKeys: 4, lib: 'adaptive' },
  tgAdaptiveCommit: { file: 'adaptive-commit.lua', numberOfKeys: 4, lib: 'adaptive' },
} as const satisfies Record<string, { file: LuaFile; numberOfKeys: number; lib: Family }>

export type ScriptName = keyof typeof SCRIPTS

const ENTRIES = Object.entries(SCRIPTS) as [ScriptName, (typeof SCRIPTS)[ScriptName]][]

/** The Lua name of a script's function: permit-acquire.lua -> permit_acquire. */
function luaName(file: LuaFile): string {
  return file.replace(/\.lua$/, '').replaceAll('-', '_')
}

/** A script file as a function of (KEYS, ARGV) that starts with its family's begin(). */
function wrapped(script: ScriptName): string {
  const { file } = SCRIPTS[script]
  return `local function ${luaName(file)}(KEYS, ARGV)\nbegin(KEYS, ARGV)\n${LUA_SOURCES[file]}\nend`
}

function preludes(lib: Family): string {
  return PRELUDES[lib].map((file) => LUA_SOURCES[file]).join('\n')
}

let sources: Map<ScriptName, { lua: string; sha: string }> | undefined

function script(name: ScriptName): { lua: string; sha: string } {
  if (!sources) {
    sources = new Map()
    for (const [script, { file, lib }] of ENTRIES) {
      const lua = `${preludes(lib)}\n${wrapped(script)}\nreturn ${luaName(file)}(KEYS, ARGV)\n`
      sources.set(script, { lua, sha: createHash('sha1').update(lua).digest('hex') })
    }
  }
  return sources.get(name) as { lua: string; sha: string }
}

/** A script with its preludes, as one EVAL body (the fallback form), assembled once per process. */
export function scriptSource(name: ScriptName): string {
  return script(name).lua
}

/** A function library: the FUNCTION LOAD text and the server-side name of each of its scripts. */
export interface Library {
  /** Library name: tollgate_<family>_<digest of its code>, so that different versions of tollgate
   * on one server each find their own code (a library is never replaced under a running version). */
  name: string
  code: string
}

let libraries: { byFamily: Record<Family, Library>; functions: Map<ScriptName, string> } | undefined

function build() {
  if (libraries) return libraries
  const byFamily = {} as Record<Family, Library>
  const functions = new Map<ScriptName, string>()
  for (const lib of Object.keys(PRELUDES) as Family[]) {
    const scripts = ENTRIES.filter(([, spec]) => spec.lib === lib)
    const body = [preludes(lib), ...scripts.map(([script]) => wrapped(script))].join('\n')
    const digest = createHash('sha1').update(body).digest('hex').slice(0, 12)
    const registrations = scripts.map(([script, { file }]) => {
      const fn = `tg_${digest}_${luaName(file)}`
      functions.set(script, fn)
      return `redis.register_function('${fn}', ${luaName(file)})`
    })
    const name = `tollgate_${lib}_${digest}`
    byFamily[lib] = { name, code: `#!lua name=${name}\n${body}\n${registrations.join('\n')}\n` }
  }
  libraries = { byFamily, functions }
  return libraries
}

/** The function libraries (FUNCTION LOAD each on every server that runs the scripts). */
export function functionLibraries(): Library[] {
  return Object.values(build().byFamily)
}

/** The server-side function (FCALL) of a script. */
export function functionName(script: ScriptName): string {
  return build().functions.get(script) as string
}

/** Register the EVAL form of our scripts on a client once (a shared client keeps the first
 * registration). ioredis then sends EVALSHA and falls back to EVAL on NOSCRIPT, per connection and
 * per Cluster node. For tests that call one script directly: the store does not use it (LuaRunner). */
export function registerScripts(client: Redis | Cluster): void {
  for (const [name, { numberOfKeys }] of ENTRIES) {
    if (name in client) continue
    client.defineCommand(name, { lua: scriptSource(name), numberOfKeys })
  }
}

/**
 * Load the function libraries through `client` (a connection, or one Cluster node). A library that
 * is already there counts as loaded (its name is its code's digest). Rejects with the server's
 * error when it refuses FUNCTION LOAD (no permission, not supported).
 */
export async function loadLibraries(client: Redis): Promise<void> {
  await Promise.all(
    functionLibraries().map(async ({ code }) => {
      try {
        await client.call('FUNCTION', 'LOAD', code)
      } catch (error) {
        if (error instanceof Error && /already exists/i.test(error.message)) return
        throw error
      }
    }),
  )
}

/** Load every script through `client` (a connection, or one Cluster node): SCRIPT LOAD. Resolves
 * false when the server or user refuses SCRIPT LOAD (then the scripts go as EVAL: ScriptRunner). */
export async function loadScripts(client: Redis): Promise<boolean> {
  try {
    await Promise.all(ENTRIES.map(([name]) => client.script('LOAD', scriptSource(name))))
    return true
  } catch (error) {
    if (error instanceof ReplyError && REFUSED.test((error as Error).message)) return false
    throw error
  }
}

/** A command refused for good: an ACL without it, a server or proxy that lacks it. */
export const REFUSED = /NOPERM|unknown command|unknown subcommand/i

type Arg = string | number
/** Calls of the registered scripts (KEYS first, then ARGV), with their raw replies. */
export type ScriptClient = Record<ScriptName, (...args: Arg[]) => Promise<unknown>>

/**
 * One way of running the Lua on a server. The store keeps one reload barrier for every way
 * (reload.ts): a call whose error reply matches `missing` did not run; it waits for load() on every
 * master, then goes again in its turn, with `again` set.
 */
export interface LuaRunner {
  /** Send one call of a script: KEYS, then the channel and the arguments (ARGV). */
  call(
    client: Redis | Cluster,
    script: ScriptName,
    keys: readonly string[],
    channel: string,
    args: readonly Arg[],
    again: boolean,
  ): Promise<unknown>
  /** The error reply of a call that did not run because the server lacks the Lua. */
  readonly missing: RegExp
  /** Put the Lua on each of `nodes` (the connection, or every master of a Cluster). */
  load(nodes: readonly Redis[]): Promise<void>
}

/** FCALL of the function libraries (the default). */
export const FCALL: LuaRunner = {
  call: (client, script, keys, channel, args) =>
    client.fcall(functionName(script), keys.length, ...keys, channel, ...args),
  missing: /function not found/i,
  load: async (nodes) => {
    await Promise.all(nodes.map((node) => loadLibraries(node)))
  },
}

/**
 * EVALSHA of the scripts, sent as is: ioredis's registered commands resend a call answered NOSCRIPT
 * as EVAL by themselves when the error comes back, after calls made later have run. A script goes as
 * EVAL (which puts it on the server) while it is not known to be there: where SCRIPT LOAD is refused,
 * until a call of it ran; and for a call that went through a reload (a node SCRIPT LOAD missed).
 * Where SCRIPT LOAD is refused, call order across a loss of the scripts holds once each script in use
 * ran since the last loss (a script still sent as EVAL runs where an earlier EVALSHA fails).
 */
class ScriptRunner implements LuaRunner {
  readonly missing = /^NOSCRIPT/
  /** Scripts on the server: all after a SCRIPT LOAD on every node; else those a call ran since. */
  private readonly known = new Set<ScriptName>()

  call(
    client: Redis | Cluster,
    name: ScriptName,
    keys: readonly string[],
    channel: string,
    args: readonly Arg[],
    again: boolean,
  ): Promise<unknown> {
    const { lua, sha } = script(name)
    if (!again && this.known.has(name)) return client.evalsha(sha, keys.length, ...keys, channel, ...args)
    return client.eval(lua, keys.length, ...keys, channel, ...args).then((reply) => {
      this.known.add(name)
      return reply
    })
  }

  /** A server that lost one script (SCRIPT FLUSH, a restart) lost them all: forget every one, so that
   * none goes as EVALSHA (and fails) while a later call of another one, sent as EVAL, runs. */
  async load(nodes: readonly Redis[]): Promise<void> {
    this.known.clear()
    const loaded = await Promise.all(nodes.map((node) => loadScripts(node)))
    if (nodes.length > 0 && loaded.every(Boolean)) for (const [name] of ENTRIES) this.known.add(name)
  }
}

/** A store's EVALSHA runner (it keeps which scripts the server has). */
export function scriptRunner(): LuaRunner {
  return new ScriptRunner()
}
