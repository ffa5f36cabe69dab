// Every scenario `npm run bench` knows, in run order. Add a scenario file and list its scenarios here.
import type { Scenario } from '../lib/scenario.js'
import { gatewayScenarios } from './gateway.js'
import { mutexScenarios } from './mutex.js'
import { redlockScenarios } from './redlock.js'

export const scenarios: Scenario[] = [...mutexScenarios, ...redlockScenarios, ...gatewayScenarios]
