// Every scenario `npm run bench` knows, in run order. Add a scenario file and list its scenarios here.
import type { Scenario } from '../lib/scenario.js'
import { adaptiveScenarios } from './adaptive.js'
import { adaptiveAttacksScenarios } from './adaptive-attacks.js'
import { adminFloodScenarios } from './admin-flood.js'
import { gatewayScenarios } from './gateway.js'
import { gatewayLatencyScenarios } from './gateway-latency.js'
import { holdsScenarios } from './holds.js'
import { middlewareScenarios } from './middleware.js'
import { mutexScenarios } from './mutex.js'
import { outageScenarios } from './outage.js'
import { overloadScenarios } from './overload.js'
import { primitivesScenarios } from './primitives.js'
import { scriptCostScenarios } from './script-costs.js'
import { redlockScenarios } from './redlock.js'
import { semaphoreScenarios } from './semaphore.js'
import { rwlockScenarios } from './rwlock.js'
import { weightedScenarios } from './weighted.js'

export const scenarios: Scenario[] = [
  ...primitivesScenarios,
  ...scriptCostScenarios,
  ...holdsScenarios,
  ...mutexScenarios,
  ...redlockScenarios,
  ...semaphoreScenarios,
  ...weightedScenarios,
  ...rwlockScenarios,
  ...gatewayScenarios,
  ...gatewayLatencyScenarios,
  ...adminFloodScenarios,
  ...middlewareScenarios,
  ...adaptiveScenarios,
  ...adaptiveAttacksScenarios,
  ...overloadScenarios,
  ...outageScenarios,
]
