// The Lua of the Redis store, assembled from the embedded lua/ sources in two forms that run the same
// code, one unit per family (permits, rwlock, adaptive) in both:
//   - a function library per family (FUNCTION LOAD once per server, then FCALL): the preludes run once
//     at load, so a call pays only for its own script (the default; an EVAL's preludes would make
//     their helpers again at every call: docs/cost.md, "How the store calls Redis");
//   - one script per family (SCRIPT LOAD once per server, then EVALSHA), for a server or user that may
//     not load functions (an ACL without FUNCTION/FCALL, a managed Redis that forbids them); a call
//     names its script in its last argument, as an FCALL names its function.
// A server then has all of a family's code or none of it (a load or a flush is all of a family), so
// calls of one name, which all use one family on one node, fail together or run together: a call
// never runs ahead of an earlier one that found its code missing. Both forms wrap the script file in a
// function of (KEYS, ARGV) that starts with its family's begin(), and both run through one runner
// contract (LuaRunner), so the store keeps one reload barrier for both.
import { createHash } from 'node:crypto'
import type { Cluster, Redis } from 'ioredis'
import {
  type Client,
  type ClusterConnection,
  type Connection,
  isCluster,
  isReplyError,
  slotMaster,
} from './client.js'
import { LUA_SOURCES, type LuaFile } from './lua-sources.js'

/** Preludes of each family of scripts, prepended in this order (they declare the helpers and begin()). */
const PRELUDES = {
  permits: [
    'lib/common.lua',
    'lib/permits.lua',
    'lib/permit-fence.lua',
    'lib/permit-holds.lua',
    'lib/permit-queue.lua',
    'lib/fair.lua',
  ],
  rwlock: ['lib/common.lua', 'lib/rwlock.lua'],
  adaptive: ['lib/common.lua', 'lib/adaptive.lua'],
} as const satisfies Record<string, readonly LuaFile[]>

type Family = keyof typeof PRELUDES

const FAMILIES = Object.keys(PRELUDES) as Family[]

/** Every script: command name -> file and family (the KEYS count is the family's). */
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

/** A family's script (the EVAL form) and how a call of one of its scripts goes. */
interface FamilyScript {
  readonly family: Family
  readonly lua: string
  readonly sha: string
}
interface ScriptCallForm {
  readonly family: FamilyScript
  /** The last argument of the call: which of the family's scripts runs. */
  readonly fn: string
}

let families: Map<ScriptName, ScriptCallForm> | undefined

/**
 * A family as one script: its preludes, then one branch per script that makes the script's function
 * and runs it, chosen by the call's last argument, which is taken off ARGV first (table.remove: O(1),
 * no copy), so each script sees the ARGV of its contract. A branch not taken makes no closure: a call
 * pays for the preludes and its own script, as a script of its own did, plus one comparison per
 * branch before its own (the most frequent calls come first).
 */
function familySource(lib: Family): string {
  const branches = ENTRIES.filter(([, spec]) => spec.lib === lib).map(([script, { file }]) => {
    const fn = luaName(file)
    return `if tollgate_script == '${fn}' then\n${wrapped(script)}\nreturn ${fn}(KEYS, ARGV)\nend`
  })
  return (
    `${preludes(lib)}\nlocal tollgate_script = table.remove(ARGV)\n${branches.join('\n')}\n` +
    `return redis.error_reply('ERR tollgate: no script ' .. tostring(tollgate_script))\n`
  )
}

function callForm(name: ScriptName): ScriptCallForm {
  if (!families) {
    families = new Map()
    for (const family of FAMILIES) {
      const lua = familySource(family)
      const script: FamilyScript = { family, lua, sha: createHash('sha1').update(lua).digest('hex') }
      for (const [name, { file, lib }] of ENTRIES)
        if (lib === family) families.set(name, { family: script, fn: luaName(file) })
    }
  }
  return families.get(name) as ScriptCallForm
}

/** The EVAL form of a script: its family's script (an EVAL or EVALSHA of it names the script in its
 * last argument, scriptArg()), assembled once per process. */
export function scriptSource(name: ScriptName): string {
  return callForm(name).family.lua
}

/** The last argument of an EVAL or EVALSHA of scriptSource(name) that runs the script `name`. */
export function scriptArg(name: ScriptName): string {
  return callForm(name).fn
}

/** Every family's script (what SCRIPT LOAD puts on a server: all of the Lua). */
export function scriptSources(): string[] {
  return FAMILIES.map((family) => {
    const [name] = ENTRIES.find(([, spec]) => spec.lib === family) as [ScriptName, unknown]
    return scriptSource(name)
  })
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
 * registration): a command per family script, and one per script that calls it with the script's
 * name appended. ioredis then sends EVALSHA and falls back to EVAL on NOSCRIPT, per connection and
 * per Cluster node. For tests that call one script directly: the store does not use it (LuaRunner). */
export function registerScripts(client: Redis | Cluster): void {
  const commands = client as unknown as Record<string, (...args: Arg[]) => Promise<unknown>>
  for (const [name, { numberOfKeys, lib }] of ENTRIES) {
    if (name in client) continue
    const family = `tg_${lib}`
    if (!(family in client)) client.defineCommand(family, { lua: scriptSource(name), numberOfKeys })
    const fn = scriptArg(name)
    commands[name] = (...args: Arg[]) =>
      (commands[family] as (...args: Arg[]) => Promise<unknown>)(...args, fn)
  }
}

/**
 * Load the function libraries through `client` (a connection, or one Cluster node). A library that
 * is already there counts as loaded (its name is its code's digest). Rejects with the server's
 * error when it refuses FUNCTION LOAD (no permission, not supported).
 */
export async function loadLibraries(client: Connection): Promise<void> {
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

/** Load every family's script through `client` (a connection, or one Cluster node): SCRIPT LOAD.
 * Resolves false when the server or user refuses SCRIPT LOAD (then the scripts go as EVAL:
 * ScriptRunner). */
export async function loadScripts(client: Connection): Promise<boolean> {
  try {
    await Promise.all(scriptSources().map((lua) => client.script('LOAD', lua)))
    return true
  } catch (error) {
    if (isReplyError(error) && REFUSED.test(error.message)) return false
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
 * master, then goes again in its turn.
 */
export interface LuaRunner {
  /** Send one call of a script: KEYS, then the channel and the arguments (ARGV). */
  call(
    client: Client,
    script: ScriptName,
    keys: readonly string[],
    channel: string,
    args: readonly Arg[],
  ): Promise<unknown>
  /** The error reply of a call that did not run because the server lacks the Lua. */
  readonly missing: RegExp
  /** Put the Lua on each of `nodes` (the connection, or every master of a Cluster). */
  load(nodes: readonly Connection[]): Promise<void>
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
 * EVALSHA of the family scripts, sent as is: ioredis's registered commands resend a call answered
 * NOSCRIPT as EVAL by themselves when the error comes back, after calls made later have run. A call
 * goes as EVALSHA once its family is known to be on the master it goes to, or on the way there:
 * everywhere after a SCRIPT LOAD on every master; where SCRIPT LOAD is refused, on a master once a
 * call of the family was sent there as EVAL (which puts it there) since the last loss: later calls go
 * on the same connection, behind it. So the calls of one name, one family on one master, all find it
 * or all miss it (and wait for the reload together), and the whole family goes as EVAL (53 KB for the
 * permits) once per master and loss.
 */
class ScriptRunner implements LuaRunner {
  readonly missing = /^NOSCRIPT/
  /** Every family is on every master: SCRIPT LOAD on each since the last loss. */
  private everywhere = false
  /** Else the families sent as EVAL since the last loss, per master (host:port; '' for a lone
   * server). */
  private readonly sent = new Map<string, Set<Family>>()

  call(
    client: Client,
    name: ScriptName,
    keys: readonly string[],
    channel: string,
    args: readonly Arg[],
  ): Promise<unknown> {
    const { family, fn } = callForm(name)
    if (this.everywhere) return client.evalsha(family.sha, keys.length, ...keys, channel, ...args, fn)
    const node = isCluster(client) ? masterOf(client, keys) : ''
    if (node !== undefined) {
      let families = this.sent.get(node)
      if (families?.has(family.family))
        return client.evalsha(family.sha, keys.length, ...keys, channel, ...args, fn)
      if (!families) this.sent.set(node, (families = new Set()))
      families.add(family.family)
    }
    return client.eval(family.lua, keys.length, ...keys, channel, ...args, fn)
  }

  /** A server that lost one family (SCRIPT FLUSH, a restart) lost them all: forget every one, so that
   * none goes as EVALSHA until it is loaded or sent again. */
  async load(nodes: readonly Connection[]): Promise<void> {
    this.everywhere = false
    this.sent.clear()
    const loaded = await Promise.all(nodes.map((node) => loadScripts(node)))
    if (nodes.length > 0 && loaded.every(Boolean)) this.everywhere = true
  }
}

/** A store's EVALSHA runner (it keeps which families the servers have). */
export function scriptRunner(): LuaRunner {
  return new ScriptRunner()
}

/** The master that a Cluster call of `keys` goes to, by its first key's slot in the client's table
 * of slots (undefined while that is not known): the calls of one name all go to one. */
function masterOf(client: ClusterConnection, keys: readonly string[]): string | undefined {
  let slot = slots.get(keys)
  if (slot === undefined) {
    slot = keySlot(keys[0] ?? '')
    slots.set(keys, slot)
  }
  return slotMaster(client, slot)
}

/** Slots of KEYS arrays (a family's are made once per name: store.ts scriptKeys). */
const slots = new WeakMap<readonly string[], number>()

/** Redis Cluster's slot of a key: CRC16 (XMODEM) of its hash tag (the text between its first `{` and
 * the next `}`, when not empty), else of the whole key, modulo 16384. */
function keySlot(key: string): number {
  const bytes = Buffer.from(key)
  let start = 0
  let end = bytes.length
  const open = bytes.indexOf(0x7b)
  if (open >= 0) {
    const close = bytes.indexOf(0x7d, open + 1)
    if (close > open + 1) {
      start = open + 1
      end = close
    }
  }
  let crc = 0
  for (let i = start; i < end; i++) {
    crc ^= (bytes[i] as number) << 8
    for (let bit = 0; bit < 8; bit++)
      crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff
  }
  return crc % 16384
}
