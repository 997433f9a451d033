// The order vitest starts test files in: the longest first, so that the long files (a 3-node
// cluster killed five times, eight takeovers) run beside many short ones instead of starting last
// and running alone while the other workers idle. On a clean clone vitest knows no durations and
// starts the largest files first, which put 60-second files of 100 lines at the end of the run.
// A file's duration comes from vitest's own cache of the last local run when it has one, else from
// durations.json (the integration tier as CI last measured it: `node scripts/test-durations.mjs
// <vitest JSON report>` rewrites it). A file known to neither starts first, as vitest does.

import { readFileSync } from 'node:fs';
import { relative } from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

const recorded: Record<string, number> = JSON.parse(readFileSync(new URL('./durations.json', import.meta.url), 'utf8'));

export class LongestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const root = this.ctx.config.root;
    const duration = (f: TestSpecification): number => {
      const path = relative(root, f.moduleId);
      const cached = this.ctx.cache.getFileTestResults(`${f.project.name}:${path}`)?.duration;
      return cached ?? (path in recorded ? recorded[path]! * 1000 : Number.POSITIVE_INFINITY);
    };
    const ms = new Map(files.map((f) => [f, duration(f)]));
    return [...files].sort(
      (a, b) =>
        // Projects stay in their groups (the unit tier runs before the integration tier).
        a.project.config.sequence.groupOrder - b.project.config.sequence.groupOrder ||
        (a.project.name < b.project.name ? -1 : a.project.name > b.project.name ? 1 : 0) ||
        ms.get(b)! - ms.get(a)! ||
        0,
    );
  }
}
