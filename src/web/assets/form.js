// A form for a question's answer, generated from its JSON Schema: a select for choices
// (or an enum), a number field for integers and numbers (with the schema's bounds), a
// checkbox for booleans, a text field for strings, one field per property of an object,
// and a JSON text area for anything else. The server checks the answer against the
// schema again and says what is wrong; the form only shapes the value.

import { h } from "./dom.js";

/** A field for `schema`; `read()` gives its value, throwing an Error when it cannot. */
function field(schema, name, choices) {
  const options = choices?.length ? choices : schema?.enum;
  if (Array.isArray(options)) {
    const select = h("select", { name }, options.map((o) => h("option", { value: JSON.stringify(o) }, String(o))));
    return { el: select, read: () => JSON.parse(select.value) };
  }
  const type = schema?.type;
  if (type === "integer" || type === "number") {
    const input = h("input", {
      type: "number", name, step: type === "integer" ? "1" : "any",
      min: schema.minimum ?? null, max: schema.maximum ?? null,
    });
    return {
      el: input,
      read: () => {
        if (input.value.trim() === "") throw new Error(`${name || "the answer"}: give a number`);
        return Number(input.value);
      },
    };
  }
  if (type === "boolean") {
    const input = h("input", { type: "checkbox", name });
    return { el: input, read: () => input.checked };
  }
  if (type === "string" || type === undefined && !schema?.properties) {
    const input = h("input", { type: "text", name });
    return { el: input, read: () => input.value };
  }
  if (type === "object" && schema.properties) {
    const parts = Object.entries(schema.properties).map(([key, sub]) => [key, field(sub, key)]);
    const el = h("fieldset", null, parts.map(([key, f]) => h("label", null, h("span", null, key), f.el)));
    return { el, read: () => Object.fromEntries(parts.map(([key, f]) => [key, f.read()])) };
  }
  const area = h("textarea", { name, rows: "3", placeholder: "JSON" });
  return {
    el: area,
    read: () => {
      try {
        return JSON.parse(area.value);
      } catch (error) {
        throw new Error(`${name || "the answer"} is not JSON: ${error.message}`);
      }
    },
  };
}

/** The form of `question` ({question, schema, choices}); `submit(value)` sends it. */
export function questionForm(question, submit) {
  const f = field(question.schema, "", question.choices);
  const status = h("span", { class: "q-status" });
  // `novalidate`: the browser's own check would block a value out of the schema's range
  // without a word; the server's refusal says why, and the question stays open.
  const form = h("form", { class: "question-form", novalidate: true },
    h("div", { class: "q-text" }, question.question),
    f.el,
    h("button", { type: "submit", class: "answer" }, "Answer"),
    status);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    status.textContent = "";
    try {
      await submit(f.read());
    } catch (error) {
      status.textContent = error.message;
    }
  });
  return form;
}
