#!/usr/bin/env python3
"""Renders the Jinja conformance cases with real Jinja2 in transformers' chat-template environment
and writes tests/data/chat/jinja_cases.json, which kestrel's JinjaConformance test replays.

The environment mirrors transformers' _compile_jinja_template: ImmutableSandboxedEnvironment with
trim_blocks=True, lstrip_blocks=True, the loopcontrols extension, transformers' tojson filter
(json.dumps with ensure_ascii=False) and the raise_exception global.

Usage: python3 tools/make_jinja_cases.py   (needs the jinja2 package; written with 3.1.6)
"""
import json
import os

import jinja2
import jinja2.ext
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception

MSGS = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "yo", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]},
]

# (name, template, variables)
CASES = [
    # ---- text, whitespace control, trim_blocks / lstrip_blocks
    ("plain_text", "hello\nworld\n", {}),
    ("trailing_newline_dropped", "a\n", {}),
    ("two_trailing_newlines", "a\n\n", {}),
    ("crlf_normalized", "a\r\nb\rc", {}),
    ("trim_blocks", "{% if true %}\nyes\n{% endif %}\nafter", {}),
    ("lstrip_blocks", "x\n    {% if true %}\n    yes\n    {% endif %}\ny", {}),
    ("lstrip_not_for_vars", "x\n    {{ 1 }}\n", {}),
    ("lstrip_text_before_tag", "x  {% if true %}y{% endif %}", {}),
    ("dash_strips", "a   \n  {%- if true -%}  \n  b  \n {%- endif -%}\n  c", {}),
    ("var_dash", "a  {{- 1 -}}  b", {}),
    ("plus_disables_lstrip", "x\n    {%+ if true %}y{% endif %}", {}),
    ("plus_disables_trim", "{% if true +%}\ny{% endif %}", {}),
    ("comment", "a {# comment #} b\n{# c #}\nd", {}),
    ("comment_dash", "a  {#- c -#}  b", {}),
    ("comment_lstrip", "a\n   {# c #}\nb", {}),
    ("raw", "{% raw %}{{ x }}{% if %}{% endraw %}", {}),
    ("raw_dash", "a  {%- raw -%}  {{ y }}  {%- endraw -%}  b", {}),
    ("tag_after_var_same_line", "{{ 'a' }}   {% if true %}b{% endif %}", {}),
    ("tab_lstrip", "\t{% if true %}x{% endif %}", {}),
    ("nested_blocks_ws", "{% for i in [1,2] %}\n  {% if i == 1 %}\n  one\n  {% else %}\n  other\n  {% endif %}\n{% endfor %}\n", {}),
    # ---- literals and printing
    ("print_types", "{{ 1 }}|{{ 1.5 }}|{{ 'a' }}|{{ true }}|{{ none }}|{{ [1, 'a', none, true] }}|{{ {'a': 1, 'b': [2]} }}", {}),
    ("print_float_forms", "{{ 1.0 }} {{ 0.1 }} {{ 1e20 }} {{ 1.5e-7 }} {{ 100.0 }} {{ 1/3 }} {{ 2.5e15 }}", {}),
    ("print_tuple", "{{ (1, 'a') }} {{ (1,) }} {{ () }}", {}),
    ("string_escapes", "{{ 'a\\nb\\t\\'c\\\\' }}|{{ \"q\\\"\" }}|{{ '\\u00e9\\x41' }}", {}),
    ("adjacent_strings", "{{ 'a' 'b' \"c\" }}", {}),
    ("repr_quotes", "{{ [\"it's\", 'say \"x\"', 'both \\' \"'] }}", {}),
    ("undefined_prints_empty", "[{{ nothing }}]", {}),
    ("unicode_text", "{{ 'héllo ✓ 😀' }}", {}),
    # ---- arithmetic
    ("int_arith", "{{ 7 + 3 }} {{ 7 - 10 }} {{ 7 * 3 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }}", {}),
    ("float_arith", "{{ 1.5 + 1 }} {{ 3 * 0.5 }} {{ 7.5 // 2 }} {{ 7.5 % 2 }} {{ 2 ** -1 }} {{ 4 / 2 }}", {}),
    ("pow_left_assoc", "{{ 2 ** 3 ** 2 }}", {}),
    ("unary", "{{ -3 }} {{ - 3 + 1 }} {{ -(3 + 1) }} {{ +4 }}", {}),
    ("precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 10 - 2 - 3 }} {{ 2 * 3 ~ 4 }}", {}),
    ("err_concat_binds_tighter_than_plus", "{{ 1 + 1 ~ 'x' }}", {}),
    ("concat_tilde", "{{ 'a' ~ 1 ~ none ~ true ~ [1] }}", {}),
    ("string_plus", "{{ 'a' + 'b' }}", {}),
    ("string_mul", "{{ 'ab' * 3 }}|{{ 2 * 'x' }}|{{ [1] * 3 }}", {}),
    ("list_plus", "{{ [1, 2] + [3] }}", {}),
    ("bool_arith", "{{ true + 1 }} {{ true * 3 }}", {}),
    ("percent_format_specs", "{{ '%.2f|%5d|%-4s|%04d|%x|%e|%3.1s|%+d|%%' % (3.14159, 42, 'ab', 7, 255, 12345.678, 'xyz', 5) }} {{ '%.2f' | format(2.5) }}", {}),
    ("percent_format", "{{ '%s is %d' % ('x', 3) }} {{ '%s' % 'y' }}", {}),
    # ---- comparisons and logic
    ("compare", "{{ 1 < 2 }} {{ 2 <= 2 }} {{ 3 > 4 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ 1 != 2 }} {{ [1,2] == [1,2] }} {{ true == 1 }}", {}),
    ("compare_chain", "{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }}", {}),
    ("in_ops", "{{ 'a' in 'cat' }} {{ 2 in [1,2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }} {{ 'z' not in 'abc' }}", {}),
    ("logic_values", "{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ '' and 'b' }} {{ none or [] }} {{ not 0 }} {{ not 'a' }}", {}),
    ("logic_precedence", "{{ true or false and false }} {{ not true or true }} {{ not (true or true) }}", {}),
    ("ternary", "{{ 'y' if 1 else 'n' }} {{ 'y' if 0 else 'n' }} [{{ 'y' if 0 }}] {{ 1 if 0 else 2 if 0 else 3 }}", {}),
    ("truthiness", "{% for v in [0, 1, '', 'a', [], [0], {}, none, 0.0] %}{{ 'T' if v else 'F' }}{% endfor %}", {}),
    # ---- variables, attributes, subscripts, slicing
    ("attr_and_item", "{{ m.role }} {{ m['role'] }} {{ m.content }} [{{ m.missing }}] {{ m.missing is defined }}", {"m": {"role": "user", "content": "c"}}),
    ("dict_method_vs_key", "{{ d['items'] }} {{ d.items() | list }}", {"d": {"items": "key"}}),
    ("nested_access", "{{ msgs[2].tool_calls[0].function.arguments.a }} {{ msgs[-1]['role'] }}", {"msgs": MSGS}),
    ("index_out_of_range", "[{{ [1,2][5] }}] {{ [1,2][5] is defined }}", {}),
    ("slices", "{{ [1,2,3,4][1:] }} {{ [1,2,3,4][:2] }} {{ [1,2,3,4][::-1] }} {{ [1,2,3,4][::2] }} {{ [1,2,3,4][-2:] }} {{ [1,2,3,4][1:-1] }} {{ [1,2,3,4][3:1:-1] }}", {}),
    ("string_slices", "{{ 'hello'[1:3] }} {{ 'hello'[::-1] }} {{ 'héllo'[1] }} {{ 'héllo'[-1] }} {{ 'héllo'[:2] }}", {}),
    ("dot_int", "{{ x.0 }} {{ x.1 }}", {"x": ["a", "b"]}),
    ("none_attr_undefined", "[{{ n.x }}] {{ n.x is defined }}", {"n": None}),
    # ---- if / for
    ("if_elif_else", "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %},{% endfor %}", {}),
    ("for_loop_vars", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}", {}),
    ("for_prev_next", "{% for x in [1,2,3] %}{{ loop.previtem }}-{{ loop.nextitem }}|{% endfor %}", {}),
    ("for_else", "{% for x in [] %}x{% else %}empty{% endfor %}{% for x in [1] %}x{% else %}empty{% endfor %}", {}),
    ("for_filter", "{% for x in range(10) if x % 3 == 0 %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% endfor %}", {}),
    ("for_unpack", "{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}", {}),
    ("for_unpack_paren", "{% for (a, b) in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}", {}),
    ("for_dict_keys", "{% for k in {'z': 1, 'a': 2} %}{{ k }}{% endfor %}", {}),
    ("for_string_chars", "{% for c in 'héy' %}[{{ c }}]{% endfor %}", {}),
    ("for_nested_loop", "{% for a in [1,2] %}{% for b in [3,4] %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }}|{% endfor %}", {}),
    ("for_break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("loop_cycle", "{% for x in range(5) %}{{ loop.cycle('a', 'b') }}{% endfor %}", {}),
    ("for_undefined_iterable", "[{% for x in nothing %}x{% endfor %}]", {}),
    ("for_scope", "{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}", {}),
    ("for_body_scope_per_iteration", "{% for i in range(3) %}{% if i == 0 %}{% set y = 5 %}{% endif %}[{{ y }}]{% endfor %}[{{ y }}]", {}),
    ("for_reads_outer_each_iteration", "{% set y = 1 %}{% for i in range(3) %}{% set y = y + 1 %}[{{ y }}]{% endfor %}[{{ y }}]", {}),
    ("nested_loop_scopes", "{% for i in [1] %}{% set x = 1 %}{% for j in [1] %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}{% endfor %}", {}),
    ("macro_scope", "{% set x = 1 %}{% macro m() %}{% set x = 2 %}{{ x }}{{ loop is defined }}{% endmacro %}{% for i in [1] %}{{ m() }}{% endfor %}{{ x }}", {}),
    ("range_forms", "{{ range(3) | list }} {{ range(1, 4) | list }} {{ range(10, 0, -3) | list }} {{ range(0) | list }}", {}),
    # ---- set, namespace, macros
    ("set_basic", "{% set x = 'a' %}{% set y = x ~ 'b' %}{{ y }}", {}),
    ("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}", {}),
    ("set_block", "{% set body %}\n  hello {{ 1 + 1 }}\n{% endset %}[{{ body }}]", {}),
    ("namespace", "{% set ns = namespace(n=0, s='') %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }}", {}),
    ("namespace_new_attr", "{% set ns = namespace() %}{% set ns.x = 5 %}{{ ns.x }}", {}),
    ("macro_basic", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ greet('b', '?') }} {{ greet(name='c', punct='.') }}", {}),
    ("macro_missing_arg", "{% macro f(a, b) %}[{{ a }}|{{ b }}]{% endmacro %}{{ f(1) }}", {}),
    ("macro_sees_globals", "{% set g = 'G' %}{% macro f() %}{{ g }}{{ top }}{% endmacro %}{{ f() }}", {"top": "T"}),
    ("macro_ws", "{%- macro render(x) -%}\n  <{{ x }}>\n{%- endmacro -%}\n{{ render(1) }}{{ render(2) }}", {}),
    ("macro_recursion_ok", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1) | int }}{% endif %}{% endmacro %}{{ fact(5) }}", {}),
    ("macro_closure_in_loop", "{% for x in [1, 2] %}{% macro m() %}{{ x }}{% endmacro %}{{ m() }}{% endfor %}", {}),
    ("macro_late_top_level", "{% set y = 1 %}{% macro m() %}{{ y }}{% endmacro %}{% set y = 3 %}{{ m() }}", {}),
    ("macro_calls_later_macro", "{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}B{% endmacro %}{{ a() }}", {}),
    ("filter_block", "{% filter upper %}abc {{ 'd' }}{% endfilter %}", {}),
    # ---- filters
    ("tojson_basic", "{{ x | tojson }}", {"x": {"b": 1, "a": [1.5, "é", None, True], "c": {"d": "q\"\n"}}}),
    ("tojson_indent", "{{ x | tojson(indent=2) }}", {"x": {"a": [1, {"b": []}], "c": {}}}),
    ("tojson_sort_keys", "{{ x | tojson(sort_keys=true) }}", {"x": {"b": 1, "a": 2}}),
    ("tojson_ensure_ascii", "{{ 'é😀' | tojson(ensure_ascii=true) }}", {}),
    ("tojson_separators", "{{ [1, {'a': 2}] | tojson(separators=(',', ':')) }}", {}),
    ("tojson_html_chars", "{{ '<a href=\"x\">&\\'' | tojson }}", {}),
    ("tojson_control", "{{ '\\x01\\x1f\\b\\f' | tojson }}", {}),
    ("trim", "[{{ '  a b \\n' | trim }}] [{{ 'xxaxx' | trim('x') }}]", {}),
    ("length_count", "{{ [1,2] | length }} {{ 'héllo' | length }} {{ {'a': 1} | count }} {{ nothing | length }}", {}),
    ("items_filter", "{% for k, v in {'a': 1, 'b': 2} | items %}{{ k }}{{ v }}{% endfor %}", {}),
    ("join", "{{ [1, 2, 3] | join(', ') }} {{ ['a', 'b'] | join }} {{ users | join(',', attribute='name') }}", {"users": [{"name": "x"}, {"name": "y"}]}),
    ("default", "{{ nothing | default('d') }} {{ '' | default('d') }} {{ '' | default('d', true) }} {{ none | d('n') }} {{ 0 | d(5, boolean=true) }}", {}),
    ("case_filters", "{{ 'aBc' | upper }} {{ 'aBc' | lower }} {{ 'hello world-foo' | title }} {{ 'hELLO there' | capitalize }}", {}),
    ("replace_filter", "{{ 'aaa' | replace('a', 'b') }} {{ 'aaa' | replace('a', 'b', 2) }}", {}),
    ("first_last", "{{ [1, 2, 3] | first }} {{ [1, 2, 3] | last }} {{ 'abc' | first }} [{{ [] | first }}]", {}),
    ("list_string", "{{ 'ab' | list }} {{ 5 | string }} {{ (1, 2) | list }}", {}),
    ("int_float", "{{ '42' | int }} {{ '4.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ 3.9 | int }} {{ '2.5' | float }} {{ 'q' | float }} {{ 3 | float }}", {}),
    ("abs_round", "{{ -3 | abs }} {{ -2.5 | abs }} {{ 2.5 | round }} {{ 3.14159 | round(2) }} {{ 2.7 | round(0, 'floor') }} {{ 2.1 | round(method='ceil') }}", {}),
    ("select_reject", "{{ [1, 2, 3, 4] | select('odd') | list }} {{ [1, 2, 3, 4] | reject('odd') | list }} {{ [0, 1, '', 'a'] | select | list }} {{ [1, 5, 10] | select('>', 3) | list }}", {}),
    ("selectattr", "{{ msgs | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }} {{ msgs | rejectattr('tool_calls') | map(attribute='role') | join(',') }} {{ msgs | selectattr('tool_calls', 'defined') | list | length }}", {"msgs": MSGS}),
    ("map_filter", "{{ ['a', 'b'] | map('upper') | list }} {{ [{'x': 1}, {}] | map(attribute='x', default=0) | list }} {{ msgs | map(attribute='role') | list }}", {"msgs": MSGS}),
    ("unique", "{{ [1, 2, 1, 3, 2] | unique | list }} {{ ['a', 'A', 'b'] | unique | list }}", {}),
    ("sort", "{{ [3, 1, 2] | sort }} {{ [3, 1, 2] | sort(reverse=true) }} {{ ['b', 'A', 'c'] | sort }} {{ ['b', 'A', 'c'] | sort(case_sensitive=true) }} {{ [{'n': 2}, {'n': 1}] | sort(attribute='n') }}", {}),
    ("indent", "{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(2, blank=true) }}", {}),
    ("safe_escape", "{{ '<b>' | safe }} {{ '<a href=\"x\">&\\'' | e }} {{ '<' | escape }}", {}),
    ("min_max_sum", "{{ [3, 1, 2] | min }} {{ [3, 1, 2] | max }} {{ [1, 2, 3] | sum }} {{ [{'a': 1}, {'a': 2}] | sum(attribute='a') }}", {}),
    ("reverse_filter", "{{ [1, 2, 3] | reverse | list }} {{ 'abc' | reverse }}", {}),
    ("dictsort", "{{ {'b': 1, 'a': 2} | dictsort }}", {}),
    ("wordcount_format", "{{ 'a b  c' | wordcount }} {{ '%s-%s' | format(1, 'x') }}", {}),
    ("filter_chain_precedence", "{{ -3 | abs }} {{ 'a' ~ 'b' | upper }} {{ [1,2] | length + 1 }} {{ not [] | length }}", {}),
    ("round_int_and_odd_float", "{{ 3 | round }} {{ true | round }} {{ 3 | round(0, 'floor') }} {{ 2.5 is odd }} {{ 3.0 is odd }} {{ 7.5 is divisibleby 2.5 }}", {}),
    ("title_filter_vs_method", "{{ '</think> a-b (c) x_y' | title }}|{{ '</think> a-b (c) x_y'.title() }}", {}),
    ("wordcount_word_chars", "{{ \"['  padded text \\\\n']\" | wordcount }} {{ 'a-b c_d' | wordcount }}", {}),
    ("list_tuple_equality", "{{ [1, 2] == (1, 2) }} {{ (1, 2) == (1, 2) }} {{ [1] != (1,) }}", {}),
    ("undefined_is_callable", "{{ nothing is callable }} {{ 'a' is callable }}", {}),
    ("percent_mapping_arg", "[{{ '' % [1] }}] [{{ 'x' % {'a': 1} }}]", {}),
    ("batch", "{{ [1,2,3,4,5] | batch(2) | list }} {{ [1,2,3] | batch(2, 0) | list }}", {}),
    # ---- tests
    ("tests_types", "{{ 1 is number }} {{ 1.5 is float }} {{ 1 is integer }} {{ true is integer }} {{ true is boolean }} {{ 'a' is string }} {{ none is none }} {{ [1] is sequence }} {{ {} is mapping }} {{ 'a' is iterable }} {{ 1 is iterable }} {{ range is callable }}", {}),
    ("tests_values", "{{ true is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 2 is in [1, 2] }}", {}),
    ("tests_defined", "{{ x is defined }} {{ y is defined }} {{ y is undefined }} {{ x is not none }} {{ x is not defined }}", {"x": 1}),
    ("tests_compare", "{{ 'a' is equalto 'a' }} {{ 1 is eq 2 }} {{ 3 is gt 2 }} {{ 3 is lt 2 }} {{ 2 is ge 2 }} {{ 'a' is ne 'b' }} {{ none is sameas none }} {{ 'abc' is lower }} {{ 'ABC' is upper }}", {}),
    ("test_in_condition", "{% if x is string and x is not none %}s{% endif %}{% if y is mapping or y is string %}m{% endif %}", {"x": "a", "y": {}}),
    ("not_is", "{{ not x is defined }} {{ not y is defined }}", {"x": 1}),
    # ---- string methods
    ("str_startswith", "{{ 'hello'.startswith('he') }} {{ 'hello'.endswith('lo') }} {{ 'hello'.startswith(('x', 'h')) }} {{ 'a'.endswith('abc') }}", {}),
    ("str_split", "{{ 'a,b,,c'.split(',') }} {{ '  a  b '.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ ' a b c '.split(none, 1) }} {{ ' a b c '.rsplit(none, 1) }}", {}),
    ("str_strip", "[{{ '  a  '.strip() }}] [{{ '\\n\\na\\n'.lstrip('\\n') }}] [{{ 'a\\n\\n'.rstrip('\\n') }}] [{{ 'xyax'.strip('xy') }}] [{{ '\\u3000a '.strip() }}]", {}),
    ("str_case", "{{ 'aB'.upper() }} {{ 'aB'.lower() }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ 'aB'.swapcase() }}", {}),
    ("str_replace_find", "{{ 'aXbXc'.replace('X', '-') }} {{ 'aXbXc'.replace('X', '-', 1) }} {{ 'héllo'.find('l') }} {{ 'abc'.find('z') }} {{ 'abcabc'.rfind('b') }} {{ 'aaa'.count('a') }} {{ 'ab'.replace('', '-') }}", {}),
    ("str_format", "{{ '{} and {}'.format(1, 'b') }} {{ '{0}{1}{0}'.format('x', 'y') }} {{ '{name}!'.format(name='n') }} {{ '{{}}'.format() }}", {}),
    ("str_join_method", "{{ ', '.join(['a', 'b']) }} {{ '-'.join('abc') }}", {}),
    ("str_predicates", "{{ '123'.isdigit() }} {{ 'abc'.isalpha() }} {{ 'a1'.isalnum() }} {{ '  '.isspace() }} {{ ''.isdigit() }} {{ 'AB'.isupper() }} {{ 'ab'.islower() }}", {}),
    ("str_misc", "{{ 'a\\nb\\r\\nc'.splitlines() }} {{ 'prefix_x'.removeprefix('prefix_') }} {{ 'x.py'.removesuffix('.py') }}", {}),
    ("qwen_think_split", "{% set c = m.split('</think>')[-1].lstrip('\\n') %}{% set r = m.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}[{{ r }}][{{ c }}]", {"m": "<think>\nreason\n</think>\n\nanswer"}),
    # ---- dict methods and literals
    ("dict_methods", "{{ d.keys() | list }} {{ d.values() | list }} {{ d.items() | list }} {{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 5) }}", {"d": {"a": 1, "b": 2}}),
    ("dict_literal_order", "{{ {'z': 1, 'a': 2, 'm': 3} | tojson }}", {}),
    ("dict_global", "{{ dict(a=1, b=2) | tojson }}", {}),
    ("list_literal_trailing_comma", "{{ [1, 2,] }} {{ {'a': 1,} }}", {}),
    # ---- chat-template idioms
    ("content_is_string_or_list", "{% for m in msgs %}{% if m.content is string %}{{ m.content }}{% else %}{% for p in m.content %}{% if p.type == 'text' %}{{ p.text }}{% endif %}{% endfor %}{% endif %}|{% endfor %}", {"msgs": [{"content": "a"}, {"content": [{"type": "text", "text": "b"}, {"type": "image"}]}]}),
    ("tool_call_args", "{% for tc in msgs[2].tool_calls %}{% set f = tc.function if tc.function is defined else tc %}{{ f.name }}({{ f.arguments | tojson }}){% endfor %}", {"msgs": MSGS}),
    ("messages_reverse_index", "{% for m in msgs[::-1] %}{{ (msgs | length - 1) - loop.index0 }}{{ m.role[0] }} {% endfor %}", {"msgs": MSGS}),
    ("enable_thinking_false", "{% if enable_thinking is defined and enable_thinking is false %}off{% else %}on{% endif %}", {"enable_thinking": False}),
    ("bos_missing", "[{{ bos_token }}]{% if bos_token %}x{% endif %}", {}),
    # ---- errors (kestrel must raise too)
    ("err_raise_exception", "{{ raise_exception('Bad role: ' ~ 'tool') }}", {}),
    ("err_undefined_attr", "{{ nothing.attr }}", {}),
    ("err_undefined_call", "{{ nothing() }}", {}),
    ("err_undefined_plus", "{{ nothing + 1 }}", {}),
    ("err_str_plus_int", "{{ 'a' + 1 }}", {}),
    ("err_div_zero", "{{ 1 / 0 }}", {}),
    ("err_mod_zero", "{{ 1 % 0 }}", {}),
    ("err_unknown_filter", "{% if false %}{{ x | frobnicate }}{% endif %}", {}),
    ("err_unknown_test", "{{ x is frobnicated }}", {}),
    ("err_syntax_unclosed_if", "{% if true %}x", {}),
    ("err_syntax_bad_expr", "{{ 1 + }}", {}),
    ("err_syntax_unknown_tag", "{% frob %}", {}),
    ("err_syntax_unclosed_var", "{{ x ", {}),
    ("err_syntax_unclosed_string", "{{ 'abc }}", {}),
    ("err_endfor_mismatch", "{% if true %}{% endfor %}", {}),
    ("err_iterate_int", "{% for x in 5 %}{% endfor %}", {}),
    ("err_none_iterate", "{% for x in none %}{% endfor %}", {}),
    ("err_compare_types", "{{ 1 < 'a' }}", {}),
    ("err_set_attr_non_namespace", "{% set d = {} %}{% set d.x = 1 %}", {}),
    ("err_unpack", "{% for a, b in [[1, 2, 3]] %}{% endfor %}", {}),
    ("err_in_int", "{{ 1 in 5 }}", {}),
    ("err_tojson_undefined", "{{ nothing | tojson }}", {}),
    ("err_break_outside_loop", "{% break %}", {}),
    ("err_macro_too_many_args", "{% macro f(a) %}{% endmacro %}{{ f(1, 2) }}", {}),
    ("err_call_non_callable", "{{ 'a'() }}", {}),
    ("err_percent_unused_arg", "{{ 'abc' % 3 }}", {}),
    ("err_slice_bool_var", "{{ (not n)[1:] }}", {"n": 0}),
    ("err_list_tuple_order", "{{ [] <= (1, 2) }}", {}),
    ("err_float_undefined", "{{ nothing | float }}", {}),
    ("err_int_undefined", "{{ nothing | int }}", {}),
    ("err_percent_missing_arg", "{{ '%s %s' % ('a',) }}", {}),
    ("err_split_empty_sep", "{{ 'a'.split('') }}", {}),
    ("err_index_undefined_item", "{{ [][0]['role'] }}", {}),
]


def main():
    out = []
    for name, template, variables in CASES:
        case = {"name": name, "template": template, "variables": variables}
        try:
            case["rendered"] = env.from_string(template).render(**variables)
        except Exception as e:  # noqa: BLE001 - any template error is an expected outcome
            case["error"] = f"{type(e).__name__}: {e}"
        out.append(case)
    path = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "chat", "jinja_cases.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"jinja2": jinja2.__version__, "cases": out}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(out)} cases ({sum('error' in c for c in out)} errors) to {os.path.normpath(path)}")


if __name__ == "__main__":
    main()
