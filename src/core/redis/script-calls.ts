// The two families of script calls of the Redis store: which script, which arguments (after the KEYS
// and the channel), how the calls of a name may be merged, and what each caller gets of the reply.
// lua/*.lua headers are the contract.
import { debuglog } from 'node:util'
import type {
  AcquireRequest,
  AdaptiveFamily,
  AdaptiveWindow,
  FairCall,
  PermitFamily,
  RwAcquireRequest,
  RwLockFamily,
} from '../protocol/store.js'
import {
  acquireRow,
  acquireRowTakes,
  acquisitionArgs,
  fairStats,
  recheckReply,
  releaseResult,
  releaseRow,
  RW_MODES,
  rwAcquireReply,
} from './replies.js'
import type { KeySpace } from '../keys.js'
import type { Call } from './coalescer.js'
import type { ScriptName } from './scripts.js'

const debug = debuglog('tollgate:store')

/** One script call as the coalescer queues it. */
export interface ScriptCall extends Call {
  readonly script: ScriptName
  readonly space: KeySpace
  /** The call's KEYS, when not the family's fixed ones (the adaptive scripts name a window). */
  readonly keys?: readonly string[] | undefined
  /** Arguments after the channel; the tokens of the (merged) call follow when `withToken`. */
  readonly head: readonly (string | number)[]
  readonly withToken: boolean
  readonly started: number
  /** What the caller asked for, for `late` (the handlers are made once per family, not per call:
   * a closure per call showed in profiles of the hot path). */
  readonly request: unknown
  /** This call's result out of the (merged) reply: the i-th call's. */
  pick(reply: unknown, i: number): unknown
  /** The reply came after commandTimeoutMs: give back what this call (the i-th) took. */
  late?(call: ScriptCall, reply: unknown, i: number): void
  /** The call failed, but Redis may have run it (its reply was lost and not resent): how to give back
   * whatever it may have taken, and for how long that could still be held. */
  undo?(call: ScriptCall): GiveBack
  /** Once per reply, before the calls resolve. */
  onReply?(call: ScriptCall, reply: unknown): void
  resolve(value: unknown): void
  reject(error: unknown): void
}

export type CallSpec = Omit<
  ScriptCall,
  'name' | 'started' | 'resolve' | 'reject' | 'kind' | 'token' | 'request'
> & {
  request?: unknown
  /** Calls with the same merge key are merged by the coalescer; undefined: never merged. */
  merge?: string
  token?: string
}

/** What an acquire whose outcome nobody learnt may hold, and how to give it back (idempotent). */
export interface GiveBack {
  release(): Promise<unknown>
  /** After this long it has run out on its own (a lease, or a place in the queue). */
  withinMs: number
}

/** How long an acquire's effect can last: a permit, or a place in the queue (alive until its
 * heartbeat lapses) and then the permit handed to it (at most its heartbeat ttl, ttl if less). */
function heldAtMost(r: { ttlMs: number; waiterTtlMs: number; enqueue: boolean }): number {
  return r.enqueue ? r.waiterTtlMs + Math.min(r.ttlMs, r.waiterTtlMs) : r.ttlMs
}

/** Queue a script call (store.ts). */
type Caller = <T>(spec: CallSpec & { pick: (reply: unknown, i: number) => T }) => Promise<T>

export function permitFamily(
  call: Caller,
  deliver: (channel: string, message: string) => void,
  /** A fair queue's KEYS (lua/lib/fair.lua: the plain seven, then D T K X). */
  fairKeys: (space: KeySpace) => readonly string[],
): PermitFamily {
  // A fair call (a semaphore with `overload`) names 11 keys; a plain call the family's 7, exactly as
  // before fair queues (its KEYS, ARGV and Lua path are unchanged).
  const keysOf = (space: KeySpace, fair: FairCall | undefined) => (fair ? fairKeys(space) : undefined)
  // Grants (and queue places) whose reply came too late are handed straight back: nothing is lost.
  const lateAcquire = (call: ScriptCall, reply: unknown, i: number) => {
    if (!acquireRowTakes(reply, i)) return
    const r = call.request as AcquireRequest
    family
      .release(call.space, r.token, r.permits, r.op, r.fair)
      .catch((error: unknown) => debug('late release failed: %o', error))
  }
  // Wake our own waiters now; the same grants still arrive by pub/sub for every process (the wait
  // group takes a grant once, for the acquisition it names).
  const released = (call: ScriptCall, reply: unknown) => {
    const grants = (reply as unknown[])[0]
    if (grants) deliver(call.space.channel, grants as string)
  }
  const undoAcquire = (call: ScriptCall): GiveBack => {
    const r = call.request as AcquireRequest
    return {
      release: () => family.release(call.space, r.token, r.permits, r.op, r.fair),
      withinMs: heldAtMost(r),
    }
  }
  const family: PermitFamily = {
    acquire: (space, r) =>
      call({
        script: 'tgPermitAcquire',
        space,
        keys: keysOf(space, r.fair),
        head: r.fair
          ? [r.ttlMs, r.permits, r.enqueue ? 1 : 0, r.waiterTtlMs, r.op ?? '', r.fair.maxQueued]
          : [r.ttlMs, r.permits, r.enqueue ? 1 : 0, r.waiterTtlMs, r.op ?? ''],
        withToken: true,
        token: r.token,
        // A reentrant owner's call never shares a call (its one token carries an acquisition id). Nor
        // does a fair queue's acquire: each token is ordered against the queue as the one before it
        // left it, admissions included (a later token of a merged call may rank ahead of an earlier
        // one and take the permit a call of its own would have left to it, or evict it), as the
        // memory store answers one call per token.
        merge:
          r.op !== undefined || r.fair
            ? undefined
            : `a ${r.ttlMs} ${r.permits} ${r.enqueue} ${r.waiterTtlMs}`,
        request: r,
        pick: acquireRow,
        late: lateAcquire,
        undo: undoAcquire,
      }),
    release: (space, token, permits, op, fair) =>
      call({
        script: 'tgPermitRelease',
        space,
        keys: keysOf(space, fair),
        head: [permits, op ?? ''],
        withToken: true,
        token,
        merge: op === undefined ? `r ${permits}${fair ? ' f' : ''}` : undefined,
        pick: releaseRow,
        onReply: released,
      }),
    renew: (space, ttlMs, holds) =>
      call({
        script: 'tgPermitRenew',
        space,
        head: [ttlMs, ...acquisitionArgs(holds)],
        withToken: false,
        pick: (reply) => {
          const [now, ...expiresAt] = reply as [number, ...number[]]
          return { now, expiresAt }
        },
      }),
    recheck: (space, permits, waiterTtlMs, waits, fair) =>
      call({
        script: 'tgPermitRecheck',
        space,
        keys: keysOf(space, fair),
        head: [permits, waiterTtlMs, ...acquisitionArgs(waits)],
        withToken: false,
        pick: recheckReply,
      }),
    inspect: (space) =>
      call({
        script: 'tgPermitInspect',
        space,
        head: [],
        withToken: false,
        pick: (reply) => {
          const [holders, queued, limit, , adaptive] = reply as [number, number, number, number, number?]
          return { holders, queued, limit: limit || undefined, adaptive: adaptive || undefined }
        },
      }),
    inspectFair: (space, fair, flows = []) =>
      call({
        script: 'tgPermitInspect',
        space,
        keys: fairKeys(space),
        head: [...flows],
        withToken: false,
        pick: (reply) => fairStats(reply, flows),
      }),
    setLimit: (space, permits, own, adaptive, fair) =>
      call({
        script: 'tgPermitSetLimit',
        space,
        keys: keysOf(space, fair),
        head: adaptive ? [permits ?? 0, own, 'a', adaptive.ttlMs, adaptive.version] : [permits ?? 0, own],
        withToken: false,
        pick: (reply) => (reply as number[])[2] !== 0,
      }),
  }
  return family
}

/** The keys of the adaptive scripts for the window reported, named by its start (lib/adaptive.lua: S R
 * C V). */
function adaptiveKeys(space: KeySpace, window: number, windowMs: number): string[] {
  return [space.key('as'), space.key('ar'), space.key(`aw${window}`), space.key(`aw${window - windowMs}`)]
}

/** A window's sums as adaptive-report.lua returns them: n d l m u o, then [bucket, count, sum]... */
function windowOf(reply: readonly number[]): AdaptiveWindow {
  const [requests = 0, drops = 0, latencyUs = 0, maxInFlight = 0, clients = 0, clientsOver = 0] = reply
  const latency: [number, number, number][] = []
  for (let i = 6; i + 2 < reply.length; i += 3)
    latency.push([reply[i] as number, reply[i + 1] as number, reply[i + 2] as number])
  return { requests, drops, latencyUs, maxInFlight, clients, clientsOver, latency }
}

export function adaptiveFamily(call: Caller): AdaptiveFamily {
  return {
    report: (space, r) =>
      call({
        script: 'tgAdaptiveReport',
        space,
        keys: adaptiveKeys(space, r.window, r.windowMs),
        head: [
          r.replica,
          r.window,
          r.requests,
          r.drops,
          Math.round(r.latencyUs),
          r.maxInFlight,
          r.windowMs,
          r.leaderTtlMs,
          r.stateTtlMs,
          r.leave ? '1' : r.join ? '2' : '0',
          r.clients,
          r.clientsOver,
          ...r.latency.flat(),
        ],
        withToken: false,
        pick: (reply) => {
          const [now, leads, replicas, stepped, state, lag, ...window] = reply as [
            number,
            number,
            number,
            number,
            string,
            number | undefined,
            ...number[],
          ]
          const base = { now, leads: leads === 1, replicas, stepped, state: state === '' ? undefined : state }
          // lag 0: the window reported, completed by this report; 1: the window before it (leader).
          if (lag === 0) return { ...base, previous: undefined, complete: windowOf(window) }
          return { ...base, previous: lag === 1 ? windowOf(window) : undefined }
        },
      }),
    commit: (space, step) =>
      call({
        script: 'tgAdaptiveCommit',
        space,
        keys: adaptiveKeys(space, step.window, step.windowMs),
        head: [step.window, step.state, step.stateTtlMs, step.based, step.windowMs],
        withToken: false,
        pick: (reply) => reply === 1,
      }),
  }
}

export function rwLockFamily(call: Caller): RwLockFamily {
  // A grant (or queue entry) whose reply came too late is handed straight back: nothing is lost.
  const lateAcquire = (call: ScriptCall, reply: unknown) => {
    const [code, position] = reply as number[]
    if (code !== 1 && (code !== 0 || position === -1)) return
    const r = call.request as RwAcquireRequest
    family
      .release(call.space, r.token, r.mode, r.op)
      .catch((error: unknown) => debug('late release failed: %o', error))
  }
  const undoAcquire = (call: ScriptCall): GiveBack => {
    const r = call.request as RwAcquireRequest
    return {
      release: () => family.release(call.space, r.token, r.mode, r.op),
      withinMs: heldAtMost(r),
    }
  }
  const family: RwLockFamily = {
    acquire: (space, r) =>
      call({
        script: 'tgRwAcquire',
        space,
        head: [r.token, RW_MODES[r.mode], r.ttlMs, r.enqueue ? 1 : 0, r.waiterTtlMs, r.op],
        withToken: false,
        pick: rwAcquireReply,
        request: r,
        late: lateAcquire,
        undo: undoAcquire,
      }),
    release: (space, token, mode, op) =>
      call({
        script: 'tgRwRelease',
        space,
        head: [token, RW_MODES[mode], op],
        withToken: false,
        pick: releaseResult,
      }),
    renew: (space, mode, ttlMs, holds) =>
      call({
        script: 'tgRwRenew',
        space,
        head: [RW_MODES[mode], ttlMs, ...acquisitionArgs(holds)],
        withToken: false,
        pick: (reply) => {
          const [now, ...expiresAt] = reply as [number, ...number[]]
          return { now, expiresAt }
        },
      }),
    recheck: (space, waiterTtlMs, waits) =>
      call({
        script: 'tgRwRecheck',
        space,
        head: [waiterTtlMs, ...acquisitionArgs(waits)],
        withToken: false,
        pick: recheckReply,
      }),
    inspect: (space) =>
      call({
        script: 'tgRwInspect',
        space,
        head: [],
        withToken: false,
        pick: (reply) => {
          const [readers, writers, queued] = reply as [number, number, number]
          return { readers, writer: writers > 0, queued }
        },
      }),
  }
  return family
}
