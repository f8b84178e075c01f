// ESLint for the website's own JavaScript: the playgrounds' ES modules (book/_static/playground/*.js)
// and this file. Run by `make lint-js` with --max-warnings 0. The runtime copied from npm
// (_build/playground/vendor/) and everything in node_modules is someone else's code, not linted here.
import js from "@eslint/js";
import globals from "globals";

export default [
  { ignores: ["_build/", "node_modules/", ".venv/", "colab/"] },
  js.configs.recommended,
  {
    files: ["book/_static/playground/*.js"],
    languageOptions: { ecmaVersion: 2024, sourceType: "module", globals: { ...globals.browser } },
    linterOptions: { reportUnusedDisableDirectives: "error" },
    rules: {
      "no-unused-vars": ["error", { args: "after-used" }],
      eqeqeq: ["error", "always"],
      "prefer-const": "error",
      "no-var": "error",
    },
  },
  {
    files: ["eslint.config.mjs"],
    languageOptions: { ecmaVersion: 2024, sourceType: "module", globals: { ...globals.node } },
  },
];
