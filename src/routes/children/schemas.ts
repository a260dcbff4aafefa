/**
 * Schemas of child creation.
 */
import { Type } from '@sinclair/typebox';
import { CHILD_MODES, PROVIDERS } from '../../domain/agent.js';
import { Budget, Content, Grants, literals, ModelSpec, ref } from '../../contract/index.js';

export { ChildCreated } from '../../contract/index.js';

export const CreateChildBody = Type.Object(
  {
    mode: literals(CHILD_MODES, { description: 'continuable: lives on after its turns, settles, cold-resumes; one-shot: one turn, then closed.' }),
    provider: Type.Optional(literals(PROVIDERS, { default: 'in-process', description: 'remote: a durable descriptor whose turns run elsewhere (no Activation, no report).' })),
    prompt: ref(Content),
    label: Type.Optional(Type.String({ maxLength: 200 })),
    instructions: Type.Optional(Type.String()),
    toolFilter: Type.Optional(
      Type.Object(
        { allow: Type.Array(Type.String({ minLength: 1, maxLength: 200 }), { maxItems: 256, description: 'Global tools the child may see; child-scoped tools (report) are not filtered.' }) },
        { additionalProperties: false },
      ),
    ),
    tools: Type.Optional(
      ref(Grants, { description: "The tools the child may call: a subset of its parent's grants (400 VALIDATION names one its parent lacks). Absent: its parent's." }),
    ),
    model: Type.Optional(
      ref(ModelSpec, { description: "The child's own model. Absent: an in-process child inherits its parent's model (if any); a remote child has none." }),
    ),
    budget: Type.Optional(
      ref(Budget, {
        description: "A grant: limits on the child's subtree, out of what the budgets above it have left (more is refused with 400 VALIDATION). Absent: it reserves nothing and spends from its ancestors' budgets.",
      }),
    ),
  },
  { additionalProperties: false },
);

