// The commit message rule (scripts/commit-message.mjs, docs/development.md "Commits"): its checks, and
// every commit on this branch since the rule began.
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { messagesSince, problems } from '../../scripts/commit-message.mjs'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))
/** The last commit before the rule: every commit after it on HEAD follows it. */
const BEFORE_THE_RULE = '37fdab8754c9f60d5a0ca624c394025e6884a035'

describe('a commit message', () => {
  it('passes as "area: imperative summary", a blank line, then a body; git comment lines are ignored', () => {
    expect(problems('store: load ioredis only to connect a URL\n\nWhy, before and after.\n')).toEqual([])
    expect(problems('bench holds: age every hold\n')).toEqual([])
    expect(problems('docs: fix a link\n\n# Please enter the commit message\n')).toEqual([])
  })

  it('fails on a long subject, a subject without its area, and a body glued to the subject', () => {
    expect(problems(`gateway: ${'x'.repeat(70)}`)).toEqual([
      'the subject has 79 characters: keep it to 72, and move the rest to the body',
    ])
    expect(problems('Fixed the gateway')).toEqual([
      'the subject should read "area: imperative summary", e.g. "store: load ioredis only for a URL"',
    ])
    expect(problems('Gateway: fix it')).toHaveLength(1)
    expect(problems('store: fix it\nbecause')).toEqual([
      'leave a blank line between the subject and the body',
    ])
  })
})

it('every commit on HEAD since the rule began follows it', () => {
  const offenders = messagesSince(BEFORE_THE_RULE, ROOT).flatMap(([hash, message]) =>
    problems(message).map((problem) => `${hash}: ${problem}`),
  )
  expect(offenders).toEqual([])
})
