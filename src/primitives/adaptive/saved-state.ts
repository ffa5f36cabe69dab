// A controller state read back (the fleet's, saved in the store as JSON, or a local limit's last),
// within this process's min and max: a reload may have changed them.
import { bounded, type ControllerState } from './controller.js'
import type { ResolvedAdaptiveOptions } from './options.js'

/** A saved state, within this process's min and max, or undefined when it is not one. */
export function parseState(text: string, options: ResolvedAdaptiveOptions): ControllerState | undefined {
  let state: ControllerState
  try {
    state = JSON.parse(text) as ControllerState
  } catch {
    return undefined
  }
  if (!Number.isFinite(state.limit) || !Number.isFinite(state.estimate)) return undefined
  return withinBounds(state, options)
}

/** A state with its limit and estimate within this process's min and max. */
export function withinBounds(state: ControllerState, options: ResolvedAdaptiveOptions): ControllerState {
  return {
    ...state,
    limit: Math.round(bounded(state.limit, options)),
    estimate: bounded(state.estimate, options),
  }
}
