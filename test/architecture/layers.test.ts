// The layers of docs/layers.md, held: the table there is read as the rule, then every import line
// of every file under src/, actors/ and sim/ (the simulators, which may import only proto/) is
// checked against it. Fails naming the file and the import on an import the table does not allow,
// on a cycle between folders and on a cycle between files, type-only imports included. Reads
// files only: no process, no socket.

import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

/** Where a folder's package imports are narrower than "any": what it may take, said for the failure. */
const PACKAGES: Record<string, { ok: (i: Import) => boolean; rule: string }> = {
  wire: { ok: (i) => i.typeOnly, rule: 'types only (`import type`)' },
  actors: { ok: (i) => i.specifier === 'xstate', rule: 'xstate only: no transport' },
};

interface Layer {
  rank: number;
  mayImport: Set<string>;
}

interface Import {
  /** The importing file, relative to the repository. */
  file: string;
  line: number;
  specifier: string;
  /** The file imported, relative to the repository; undefined for a package. */
  target?: string;
  typeOnly: boolean;
}

/** The table of docs/layers.md: folder → rank and the folders it may import. */
function readLayers(): Map<string, Layer> {
  const text = readFileSync(join(ROOT, 'docs/layers.md'), 'utf8');
  const layers = new Map<string, Layer>();
  for (const m of text.matchAll(/^\|\s*(\d+)\s*\|\s*`([\w-]+)`\s*\|([^|]*)\|/gm)) {
    const mayImport = new Set([...m[3]!.matchAll(/`([\w-]+)`/g)].map((x) => x[1]!));
    layers.set(m[2]!, { rank: Number(m[1]), mayImport });
  }
  return layers;
}

function tsFiles(dir: string): string[] {
  const abs = join(ROOT, dir);
  if (!existsSync(abs)) return [];
  return readdirSync(abs).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(join(ROOT, path)).isDirectory()) return tsFiles(path);
    return name.endsWith('.ts') ? [path] : [];
  });
}

// Imports start a line; a dynamic import names a literal. Comment lines are skipped.
const STATIC = /^(import|export)\s+(type\s+)?([^'";]*?)\s*(?:from\s*)?(['"])([^'"]+)\4/gm;
const DYNAMIC = /\bimport\(\s*(['"])([^'"]+)\1\s*\)/g;

function importsOf(file: string): Import[] {
  const text = readFileSync(join(ROOT, file), 'utf8');
  const lineOf = (index: number) => text.slice(0, index).split('\n').length;
  const out: Import[] = [];
  const add = (index: number, specifier: string, typeOnly: boolean) => {
    const target = specifier.startsWith('.') ? relative(ROOT, resolve(ROOT, dirname(file), specifier)) : undefined;
    out.push({ file, line: lineOf(index), specifier, target, typeOnly });
  };
  for (const m of text.matchAll(STATIC)) {
    const [, keyword, typeWord, clause] = m;
    // `export const x = ...` and the like have no module: only `export ... from` counts.
    if (keyword === 'export' && !/^(\*|\{)/.test(clause!.replace(/^type\s+/, ''))) continue;
    const braces = /^\{([^}]*)\}$/.exec(clause!.trim());
    const names = braces?.[1]!
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean);
    const typeOnly = typeWord !== undefined || (names !== undefined && names.length > 0 && names.every((n) => n.startsWith('type ')));
    add(m.index, m[5]!, typeOnly);
  }
  for (const m of text.matchAll(DYNAMIC)) {
    const lineStart = text.lastIndexOf('\n', m.index) + 1;
    if (/^\s*(\/\/|\*)/.test(text.slice(lineStart, m.index))) continue;
    add(m.index, m[2]!, false);
  }
  return out;
}

/** The folder a file belongs to: `actors`, the first folder under src/, or `sim` for either simulator tree. */
function folderOf(path: string): string | undefined {
  const parts = path.split('/');
  if (parts[0] === 'actors' || parts[0] === 'sim' || parts[0] === 'proto') return parts[0];
  if (parts[0] === 'src' && parts.length > 2) return parts[1];
  return undefined;
}

const where = (i: Import) => `${i.file}:${i.line} imports '${i.specifier}'`;

/** Every cycle of a graph, each once, as its strongly connected component (Tarjan). */
function cycles(graph: Map<string, Set<string>>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (v: string) => {
    index.set(v, index.size);
    low.set(v, index.get(v)!);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) !== index.get(v)) return;
    const component: string[] = [];
    for (let w = stack.pop()!; ; w = stack.pop()!) {
      onStack.delete(w);
      component.push(w);
      if (w === v) break;
    }
    if (component.length > 1 || graph.get(v)?.has(v)) found.push(component.sort());
  };
  for (const v of [...graph.keys()].sort()) if (!index.has(v)) visit(v);
  return found;
}

const layers = readLayers();
const files = [...tsFiles('src'), ...tsFiles('actors'), ...tsFiles('sim')].sort();
const imports = files.flatMap(importsOf);
const isSim = (path: string) => folderOf(path) === 'sim';

describe('the layers of docs/layers.md', () => {
  it('reads the table and finds the files', () => {
    expect(layers.get('wire')?.rank).toBe(0);
    expect(files.length).toBeGreaterThan(100);
    expect(imports.filter((i) => i.target).length).toBeGreaterThan(500);
  });

  it('gives every folder a row, and every row points only down', () => {
    const folders = new Set(files.map(folderOf).filter((f): f is string => f !== undefined && f !== 'sim'));
    const problems: string[] = [];
    for (const f of folders) if (!layers.has(f)) problems.push(`folder \`${f}\` has no row in docs/layers.md`);
    for (const [name, layer] of layers) {
      for (const dep of layer.mayImport) {
        if (dep === 'sim') continue; // the simulators are no layer: see docs/layers.md
        const below = layers.get(dep);
        if (!below) problems.push(`\`${name}\` may import \`${dep}\`, which has no row`);
        else if (below.rank >= layer.rank)
          problems.push(`\`${name}\` (rank ${layer.rank}) may import \`${dep}\` (rank ${below.rank}): an arrow must point down`);
      }
    }
    expect(problems).toEqual([]);
  });

  it('allows no import the table does not list', () => {
    const refused: string[] = [];
    for (const i of imports) {
      if (!i.target || isSim(i.file)) continue;
      const from = folderOf(i.file)!;
      const to = folderOf(i.target);
      if (to === from || to === 'proto') continue;
      if (to === undefined) refused.push(`${where(i)}: outside src/ and actors/`);
      else if (!layers.get(from)?.mayImport.has(to)) refused.push(`${where(i)}: \`${from}\` may not import \`${to}\` (docs/layers.md)`);
    }
    expect(refused).toEqual([]);
  });

  it('lets the simulators import nothing of the product but proto/', () => {
    const refused: string[] = [];
    for (const i of imports) {
      if (!i.target || !isSim(i.file) || isSim(i.target) || folderOf(i.target) === 'proto') continue;
      refused.push(`${where(i)}: the simulators share nothing with the gateway but proto/`);
    }
    expect(refused).toEqual([]);
  });

  it('keeps the package rules: wire imports package types only, actors only xstate', () => {
    const refused: string[] = [];
    for (const i of imports) {
      const folder = folderOf(i.file) ?? '';
      const rule = PACKAGES[folder];
      if (rule && !i.target && !rule.ok(i)) refused.push(`${where(i)}: \`${folder}\` takes from packages ${rule.rule}`);
      if (folder === 'wire' && i.target && folderOf(i.target) !== 'wire') refused.push(`${where(i)}: \`wire\` imports nothing of ours`);
    }
    expect(refused).toEqual([]);
  });

  it('has no cycle between folders', () => {
    const graph = new Map<string, Set<string>>();
    for (const i of imports) {
      const from = folderOf(i.file);
      const to = i.target ? folderOf(i.target) : undefined;
      if (!from || !to || from === to) continue;
      if (!graph.has(from)) graph.set(from, new Set());
      graph.get(from)!.add(to);
    }
    expect(cycles(graph).map((c) => c.join(' ↔ '))).toEqual([]);
  });

  it('has no cycle between files, type-only imports included', () => {
    const graph = new Map<string, Set<string>>();
    for (const i of imports) {
      if (!i.target) continue;
      if (!graph.has(i.file)) graph.set(i.file, new Set());
      graph.get(i.file)!.add(i.target);
    }
    const byFile = (c: string[]) =>
      c
        .map(
          (f) =>
            `${f} (${imports
              .filter((i) => i.file === f && c.includes(i.target ?? ''))
              .map((i) => `line ${i.line} '${i.specifier}'`)
              .join(', ')})`,
        )
        .join(' ↔ ');
    expect(cycles(graph).map(byFile)).toEqual([]);
  });
});
