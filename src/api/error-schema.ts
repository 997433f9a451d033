// The error envelope every route may answer, as a schema for the API document: the stable code
// from the catalogue (errors.ts), a message for people, and context fields beside them.

import { Type } from '@sinclair/typebox';
import { ErrorStatus } from './errors.ts';

export const ErrorAnswer = Type.Object(
  {
    error: Type.Union(
      Object.keys(ErrorStatus).map((code) => Type.Literal(code)),
      { description: 'Stable error code (SMG-compatible where SMG has one).' },
    ),
    message: Type.String({ description: 'What went wrong, for people.' }),
  },
  { additionalProperties: true, description: 'An error: `error` and `message`, with context fields (worker_id, selector, limit, ...) as siblings.' },
);
