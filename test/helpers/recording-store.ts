// A recording wrapper around a real store (the memory store in unit tests): every permit call is
// recorded as the store received it, and a test can make the store answer what a fair queue would
// (a shed reply, a "<token> x" line, a re-check state 'shed', a fair queue's figures) before the
// stores' own fair paths exist. Not a mock of Redis: every other answer is the real store's.
import type { KeySpace } from '../../src/core/keys.js'
import type {
  AcquireReply,
  AcquireRequest,
  FairPermitStats,
  Grant,
  PermitFamily,
  RecheckReply,
  Store,
} from '../../src/core/protocol/store.js'

export interface RecordedCall {
  method: string
  /** The arguments after the space, as received (the space as its name). */
  args: unknown[]
}

export interface RecordingStore extends Store {
  readonly calls: RecordedCall[]
  /** The next acquire calls answer this instead (the call does not reach the store). */
  acquireReplies: AcquireReply[]
  /** Called with each acquire's request before it reaches the store; may hold it back. */
  beforeAcquire: ((request: AcquireRequest) => Promise<void> | void) | undefined
  /** From now on, a re-check of `token` answers 'shed' (the token is taken out of the store's queue
   * first, as a fair queue's eviction does). */
  markShed(space: KeySpace, token: string): Promise<void>
  /** What inspectFair adds to the store's own figures. */
  fairFigures: Omit<FairPermitStats, keyof Awaited<ReturnType<PermitFamily['inspect']>>>
  /** Publish a "<token> x" line on a name's channel, as a fair queue's eviction does (the token is
   * taken out of the store's queue first, as the eviction does). */
  shedLine(space: KeySpace, token: string): Promise<void>
  /** Calls of one method. */
  of(method: string): RecordedCall[]
}

/** `store` wrapped (`inspectFair`: whether the wrapper offers it). */
export function recordingStore(store: Store, { inspectFair = true } = {}): RecordingStore {
  const inner = store.permits
  const sheds = new Map<string, Set<(token: string) => void>>()
  const calls: RecordedCall[] = []
  const shedTokens = new Set<string>()
  const record = (method: string, args: unknown[]) =>
    calls.push({ method, args: args.map((a) => (a === undefined ? a : structuredClone(a))) })
  /** Take a token out of the real store's queue, unrecorded (what an eviction does). */
  const evict = (space: KeySpace, token: string) =>
    inner.release(space, token, permitsAsked, undefined, fairAsked)
  /** The permits and fair call of the last acquire (what an eviction's admission runs with). */
  let permitsAsked = 1
  let fairAsked: AcquireRequest['fair'] = undefined
  const permits: PermitFamily = {
    async acquire(space, request) {
      record('acquire', [request])
      permitsAsked = request.permits
      fairAsked = request.fair
      await recording.beforeAcquire?.(request)
      const canned = recording.acquireReplies.shift()
      return canned ?? inner.acquire(space, request)
    },
    acquireNow: inner.acquireNow
      ? (space, request) => {
          record('acquireNow', [request])
          return inner.acquireNow!(space, request)
        }
      : undefined,
    release(space, ...args) {
      record('release', args)
      return inner.release(space, ...args)
    },
    releaseNow: inner.releaseNow
      ? (space, ...args) => {
          record('releaseNow', args)
          return inner.releaseNow!(space, ...args)
        }
      : undefined,
    renew(space, ...args) {
      record('renew', args)
      return inner.renew(space, ...args)
    },
    async recheck(space, ...args) {
      record('recheck', args)
      const [, , waits] = args
      const reply: RecheckReply = await inner.recheck(space, ...args)
      return {
        ...reply,
        states: reply.states.map((state, i) =>
          shedTokens.has(waits[i]!.token) ? { state: 'shed' as const } : state,
        ),
      }
    },
    inspect(space, ...args) {
      record('inspect', args)
      return inner.inspect(space)
    },
    setLimit(space, ...args) {
      record('setLimit', args)
      return inner.setLimit(space, ...args)
    },
  }
  if (inspectFair)
    permits.inspectFair = async (space, ...args) => {
      record('inspectFair', args)
      return { ...(await inner.inspect(space)), ...recording.fairFigures }
    }
  const recording: RecordingStore = {
    kind: store.kind,
    prefix: store.prefix,
    get notificationsHealthy() {
      return store.notificationsHealthy
    },
    permits,
    rwlock: store.rwlock,
    calls,
    acquireReplies: [],
    beforeAcquire: undefined,
    async markShed(space, token) {
      await evict(space, token)
      shedTokens.add(token)
    },
    fairFigures: { classes: {}, parked: 0, evicted: {}, saturated: [], mixed: false, flows: {} },
    async subscribe(space, onGrant: (grant: Grant) => void, onShed?: (token: string) => void) {
      const unsubscribe = await store.subscribe(space, onGrant)
      if (!onShed) return unsubscribe
      let set = sheds.get(space.channel)
      if (!set) sheds.set(space.channel, (set = new Set()))
      set.add(onShed)
      return () => {
        set.delete(onShed)
        unsubscribe()
      }
    },
    async shedLine(space, token) {
      await evict(space, token)
      for (const listener of sheds.get(space.channel) ?? []) listener(token)
    },
    of: (method) => calls.filter((call) => call.method === method),
    close: () => store.close(),
  }
  return recording
}
