// A script call as the store queues it (the coalescer batches them by name), and what each script is
// called in error messages.
import { monoNow } from '../clock.js'
import type { KeySpace } from '../keys.js'
import type { CallSpec, ScriptCall } from './script-calls.js'
import type { ScriptName } from './scripts.js'

/** What each script does, in the words of an error message: "Could not <verb> "<name>"". */
export const VERBS: Record<ScriptName, string> = {
  tgPermitAcquire: 'acquire',
  tgPermitRelease: 'release',
  tgPermitRenew: 'renew',
  tgPermitRecheck: 'check the queue of',
  tgPermitInspect: 'read the state of',
  tgPermitSetLimit: 'set the permits of',
  tgRwAcquire: 'acquire',
  tgRwRelease: 'release',
  tgRwRenew: 'renew',
  tgRwRecheck: 'check the queue of',
  tgRwInspect: 'read the state of',
  tgAdaptiveReport: 'report the adaptive limit of',
  tgAdaptiveCommit: 'step the adaptive limit of',
}

/** A call as the coalescer queues it. One class (every field always set) rather than a spread of the
 * spec: the hot path then reads fields of one object shape (docs/cost.md, "Why the code is as it
 * is"). */
export class QueuedCall implements ScriptCall {
  readonly name: string
  readonly kind: string | undefined
  readonly token: string
  readonly script: ScriptCall['script']
  readonly space: KeySpace
  readonly keys: ScriptCall['keys']
  readonly head: readonly (string | number)[]
  readonly withToken: boolean
  readonly started = monoNow()
  readonly pick: ScriptCall['pick']
  readonly request: unknown
  readonly late: ScriptCall['late']
  readonly undo: ScriptCall['undo']
  readonly onReply: ScriptCall['onReply']

  constructor(
    spec: CallSpec,
    readonly resolve: (value: unknown) => void,
    readonly reject: (error: unknown) => void,
  ) {
    this.name = spec.space.channel
    this.kind = spec.merge
    this.token = spec.token ?? ''
    this.script = spec.script
    this.space = spec.space
    this.keys = spec.keys
    this.head = spec.head
    this.withToken = spec.withToken
    this.pick = spec.pick
    this.request = spec.request
    this.late = spec.late
    this.undo = spec.undo
    this.onReply = spec.onReply
  }
}
