// isMixedBytes reads the common bodies without parsing them; whatever path it takes, its answer
// must be the one SMG's rule (isMixedBody over the parsed body) gives.

import { describe, expect, it } from 'vitest';
import { isMixedBody, isMixedBytes } from '../../src/relay/stamping.ts';

const meta = (m: Record<string, unknown>) => ({ text: 'hi', output_ids: [1, 2], meta_info: { id: 'x', finish_reason: { type: 'length', length: 2 }, ...m } });

const BODIES: Array<[string, string]> = [
  ['no version at all', JSON.stringify(meta({}))],
  ['same version', JSON.stringify(meta({ weight_version: '3' }))],
  ['other version', JSON.stringify(meta({ weight_version: '4' }))],
  ['numeric version', JSON.stringify(meta({ weight_version: 3 }))],
  ['numeric other version', JSON.stringify(meta({ weight_version: 7 }))],
  ['spaced JSON, same version', JSON.stringify(meta({ weight_version: '3' }), null, 2)],
  ['python-style separators, other version', JSON.stringify(meta({ weight_version: '4' })).replace(/":/g, '": ')],
  ['one span', JSON.stringify(meta({ weight_version: '3', weight_versions: [{ version: '3' }] }))],
  ['two spans', JSON.stringify(meta({ weight_version: '3', weight_versions: [{ version: '2' }, { version: '3' }] }))],
  ['batch, all same', JSON.stringify([meta({ weight_version: '3' }), meta({ weight_version: '3' })])],
  ['batch, one other', JSON.stringify([meta({ weight_version: '3' }), meta({ weight_version: '2' })])],
  ['the key inside generated text only', JSON.stringify({ ...meta({}), text: '"weight_version":"9"' })],
  ['the key inside text, same version in meta', JSON.stringify({ ...meta({ weight_version: '3' }), text: 'weight_version' })],
  ['key spelled with a unicode escape, other version', JSON.stringify(meta({})).replace('"meta_info":{', '"meta_info":{"weight\\u005fversion":"4",')],
  ['escaped quote before the key name in a key', JSON.stringify({ 'a"weight_version': '3', meta_info: {} })],
  ['empty version string', JSON.stringify(meta({ weight_version: '' }))],
  ['version with a quote in it', JSON.stringify(meta({ weight_version: 'v"3' }))],
  ['non-ASCII version', JSON.stringify(meta({ weight_version: 'étape-3' }))],
  ['version as prefix of the value', JSON.stringify(meta({ weight_version: '33' }))],
  ['not JSON', 'data: {"weight_version":"4"}\n\n'],
  ['truncated JSON', JSON.stringify(meta({ weight_version: '3' })).slice(0, -10)],
];

const TABLE_VERSIONS = [undefined, '3', '4', 'v"3', 'étape-3', '03'];

describe('isMixedBytes', () => {
  for (const [name, text] of BODIES) {
    it(`${name}: the parsed rule's answer for every table version`, () => {
      for (const table of TABLE_VERSIONS) {
        let want = false; // an unparsable body is not mixed
        try {
          want = isMixedBody(JSON.parse(text), table);
        } catch {
          want = false;
        }
        expect(isMixedBytes(Buffer.from(text), table), `table version ${table ?? '(none)'}`).toBe(want);
      }
    });
  }

  it('flags the cases that matter', () => {
    expect(isMixedBytes(Buffer.from(JSON.stringify(meta({ weight_version: '4' }))), '3')).toBe(true);
    expect(isMixedBytes(Buffer.from(JSON.stringify(meta({ weight_version: '3' }))), '3')).toBe(false);
    expect(isMixedBytes(Buffer.from(JSON.stringify(meta({ weight_versions: [{}, {}] }))), undefined)).toBe(true);
    expect(isMixedBytes(Buffer.from(JSON.stringify([meta({ weight_version: '3' }), meta({ weight_version: '2' })])), '3')).toBe(true);
  });
});
