// The tree-walking evaluator behind Template::render.
#include <algorithm>

#include "chat/ast.h"
#include "chat/parser.h"
#include "chat/template.h"

namespace kestrel::chat {

namespace {

// Unknown filters and tests are errors when the template is compiled, as in Jinja; like Jinja
// 3, those inside the branches of an if or a conditional expression only fail when they run.
void validate(const Node& node, bool conditional = false) {
  if (!conditional && node.kind == NodeKind::kFilter && !find_filter(node.name)) {
    template_error(node.pos, cat("unknown filter '", node.name, "'"));
  }
  if (!conditional && node.kind == NodeKind::kTest && !find_test(node.name)) {
    template_error(node.pos, cat("unknown test '", node.name, "'"));
  }
  for (size_t i = 0; i < node.kids.size(); ++i) {
    bool branch = (node.kind == NodeKind::kIf && (i % 2 == 1 || i + 1 == node.kids.size())) ||
                  (node.kind == NodeKind::kCondExpr && i != 1);
    if (node.kids[i]) validate(*node.kids[i], conditional || branch);
  }
  for (const auto& a : node.args) validate(*a, conditional);
  for (const auto& kv : node.kwargs) validate(*kv.second, conditional);
}

enum class Flow { kNormal, kBreak, kContinue };

// "messages[0].role" for error messages about undefined values.
std::string describe(const Node& node) {
  switch (node.kind) {
    case NodeKind::kName: return node.name;
    case NodeKind::kLiteral: return repr(node.value);
    case NodeKind::kGetAttr: return describe(*node.kids[0]) + "." + node.name;
    case NodeKind::kGetItem: return describe(*node.kids[0]) + "[" + describe(*node.kids[1]) + "]";
    case NodeKind::kCall: return describe(*node.kids[0]) + "(...)";
    default: return "(expression)";
  }
}

class Interpreter {
 public:
  Interpreter(const Map& variables, const RenderBounds& bounds) : budget_(bounds) {
    root_ = make_globals(budget_);
    for (const auto& [k, v] : variables.items()) root_.set(k, v);
  }

  std::string run(const Node& body) {
    ScopedExpansionLimit limit({.max_bytes = budget_.bounds().max_output_bytes,
                                .max_visits = budget_.bounds().max_steps});
    exec(body);
    return std::move(out_);
  }

 private:
  using Frame = std::vector<std::pair<std::string, Value>>;

  // ---- scopes

  Value lookup(const std::string& name) const {
    for (size_t i = frames_.size(); i-- > floor_;) {
      for (const auto& [k, v] : frames_[i]) {
        if (k == name) return v;
      }
    }
    if (const Value* v = root_.find(name)) return *v;
    return Value::undefined(name);
  }

  void assign(const std::string& name, Value value) {
    if (frames_.size() == floor_) {
      root_.set(name, std::move(value));
      return;
    }
    Frame& frame = frames_.back();
    for (auto& [k, v] : frame) {
      if (k == name) {
        v = std::move(value);
        return;
      }
    }
    frame.emplace_back(name, std::move(value));
  }

  void emit(const std::string& text) {
    // Text captured by enclosing macro calls and set blocks counts too.
    budget_.check_size(held_bytes_ + out_.size() + text.size());
    budget_.charge(int64_t(text.size() / 256));
    out_ += text;
  }

  // Runs `body` with output captured into a string.
  std::string capture(const Node& body) {
    std::string saved;
    std::swap(saved, out_);
    held_bytes_ += saved.size();
    struct Restore {
      Interpreter& in;
      std::string& saved;
      ~Restore() {
        in.held_bytes_ -= saved.size();
        std::swap(saved, in.out_);
      }
    };
    {
      Restore restore{*this, saved};
      exec(body);
    }
    return saved;  // after Restore: the captured text
  }

  void unpack(const std::vector<std::string>& names, const Value& value) {
    if (names.size() == 1) {
      assign(names[0], value);
      return;
    }
    if (!value.is_list()) {
      throw JinjaFault(cat("cannot unpack a ", value.type_name(), " into ", names.size(), " variables"));
    }
    if (value.list().size() != names.size()) {
      throw JinjaFault(cat("cannot unpack ", value.list().size(), " values into ", names.size(), " variables"));
    }
    for (size_t i = 0; i < names.size(); ++i) assign(names[i], value.list()[i]);
  }

  // ---- statements

  Flow exec(const Node& node) {
    budget_.charge(1);
    try {
      return exec_inner(node);
    } catch (const JinjaFault& f) {
      template_error(node.pos, f.what());
    }
  }

  Flow exec_inner(const Node& node) {
    switch (node.kind) {
      case NodeKind::kBody:
        for (const auto& stmt : node.kids) {
          Flow flow = exec(*stmt);
          if (flow != Flow::kNormal) return flow;
        }
        return Flow::kNormal;
      case NodeKind::kText: emit(node.value.str()); return Flow::kNormal;
      case NodeKind::kPrint: emit(to_str(eval(*node.kids[0]))); return Flow::kNormal;
      case NodeKind::kIf: {
        size_t n = node.kids.size();
        for (size_t i = 0; i + 1 < n; i += 2) {
          if (eval(*node.kids[i]).truthy()) return exec(*node.kids[i + 1]);
        }
        if (n % 2 == 1) return exec(*node.kids[n - 1]);
        return Flow::kNormal;
      }
      case NodeKind::kFor: exec_for(node); return Flow::kNormal;
      case NodeKind::kSet: {
        Value value = eval(*node.kids[0]);
        if (!node.attr.empty()) {
          Value target = lookup(node.names[0]);
          if (!target.is_namespace()) {
            throw JinjaFault(cat("cannot assign attribute '", node.attr, "' on '", node.names[0],
                                 "' (a ", target.type_name(), "): only namespace() objects take attributes"));
          }
          Value::check_storable_in_namespace(value);
          target.map_mut().set(node.attr, std::move(value));
        } else {
          unpack(node.names, value);
        }
        return Flow::kNormal;
      }
      case NodeKind::kSetBlock: {
        Value value(capture(*node.kids[0]));
        for (size_t i = 1; i < node.kids.size(); ++i) value = apply_filter(*node.kids[i], value);
        assign(node.names[0], value);
        return Flow::kNormal;
      }
      case NodeKind::kFilterBlock: {
        Value value(capture(*node.kids[0]));
        for (size_t i = 1; i < node.kids.size(); ++i) value = apply_filter(*node.kids[i], value);
        emit(to_str(value));
        return Flow::kNormal;
      }
      case NodeKind::kMacro: assign(node.name, make_macro(node)); return Flow::kNormal;
      case NodeKind::kBreak: return Flow::kBreak;
      case NodeKind::kContinue: return Flow::kContinue;
      default: emit(to_str(eval(node))); return Flow::kNormal;
    }
  }

  void exec_for(const Node& node) {
    Value iterable = eval(*node.kids[0]);
    List materialized;
    const List* items = &materialized;
    if (iterable.is_list()) {
      items = &iterable.list();  // lists are never mutated while rendering: no copy
    } else {
      materialized = iterate(iterable, budget_);
    }
    const Node* filter = node.kids[2].get();
    frames_.emplace_back();
    struct Pop {
      std::vector<Frame>& f;
      ~Pop() { f.pop_back(); }
    } pop{frames_};
    List kept;
    if (filter) {
      for (const auto& item : *items) {
        budget_.charge(1);
        frames_.back().clear();
        unpack(node.names, item);
        if (eval(*filter).truthy()) kept.push_back(item);
      }
      items = &kept;
    }
    const int64_t n = int64_t(items->size());
    // One loop object per loop, updated in place each iteration (as Jinja's LoopContext is).
    Value loop;
    auto index = std::make_shared<int64_t>(0);
    if (node.uses_loop) {
      Map m;
      for (const char* key : {"index0", "index", "revindex0", "revindex", "first", "last", "length", "depth",
                              "depth0", "previtem", "nextitem"}) {
        m.set(key, Value());
      }
      m.set("cycle", Value::callable("loop.cycle", [index](CallArgs& args) {
              if (args.positional.empty()) throw JinjaFault("loop.cycle() needs at least one argument");
              return args.positional[size_t(*index) % args.positional.size()];
            }));
      loop = Value(std::move(m));
    }
    for (int64_t i = 0; i < n; ++i) {
      budget_.charge(1);
      frames_.back().clear();  // as in Jinja, what the body sets lasts one iteration
      unpack(node.names, (*items)[size_t(i)]);
      if (node.uses_loop) {
        *index = i;
        Map& m = loop.map_mut();
        m.value_at(0) = Value(i);
        m.value_at(1) = Value(i + 1);
        m.value_at(2) = Value(n - i - 1);
        m.value_at(3) = Value(n - i);
        m.value_at(4) = Value(i == 0);
        m.value_at(5) = Value(i == n - 1);
        m.value_at(6) = Value(n);
        m.value_at(7) = Value(1);
        m.value_at(8) = Value(0);
        m.value_at(9) = i > 0 ? (*items)[size_t(i - 1)] : Value::undefined("loop.previtem");
        m.value_at(10) = i + 1 < n ? (*items)[size_t(i + 1)] : Value::undefined("loop.nextitem");
        assign("loop", loop);
      }
      Flow flow = exec(*node.kids[1]);
      if (flow == Flow::kBreak) break;
    }
    if (n == 0 && node.kids[3]) exec(*node.kids[3]);
  }

  // A macro sees the template's top-level variables as they are when it is called, and the
  // variables of the scopes it was defined in (a loop's, another macro's) as they were then.
  Value make_macro(const Node& node) {
    const Node* macro = &node;
    Frame closure;
    for (size_t i = floor_; i < frames_.size(); ++i) {
      for (const auto& [k, v] : frames_[i]) {
        auto it = std::find_if(closure.begin(), closure.end(), [&](const auto& kv) { return kv.first == k; });
        if (it != closure.end()) it->second = v;
        else closure.emplace_back(k, v);
      }
    }
    return Value::callable(node.name, [this, macro, closure = std::move(closure)](CallArgs& args) -> Value {
      const auto& params = macro->names;
      if (args.positional.size() > params.size()) {
        throw JinjaFault(cat("macro '", macro->name, "' takes at most ", params.size(), " argument",
                             params.size() == 1 ? "" : "s", " (", args.positional.size(), " given)"));
      }
      for (const auto& kv : args.keyword) {
        if (std::find(params.begin(), params.end(), kv.first) == params.end()) {
          throw JinjaFault(cat("macro '", macro->name, "' has no parameter named '", kv.first, "'"));
        }
      }
      if (++depth_ > budget_.bounds().max_depth) {
        --depth_;
        throw JinjaFault(cat("macro calls nest deeper than the bound of ", budget_.bounds().max_depth,
                             " (recursion without end?)"));
      }
      size_t saved_floor = floor_;
      frames_.push_back(closure);
      floor_ = frames_.size() - 1;
      frames_.emplace_back();
      struct Restore {
        Interpreter& in;
        size_t floor;
        ~Restore() {
          in.frames_.pop_back();
          in.frames_.pop_back();
          in.floor_ = floor;
          --in.depth_;
        }
      } restore{*this, saved_floor};
      for (size_t i = 0; i < params.size(); ++i) {
        Value v;
        bool given = false;
        if (i < args.positional.size()) {
          v = args.positional[i], given = true;
        } else {
          for (const auto& kv : args.keyword) {
            if (kv.first == params[i]) v = kv.second, given = true;
          }
        }
        if (!given) {
          const Node* def = macro->kids[i + 1].get();
          v = def ? eval(*def) : Value::undefined(params[i]);
        }
        assign(params[i], v);
      }
      return Value(capture(*macro->kids[0]));
    });
  }

  // ---- expressions

  Value eval(const Node& node) {
    budget_.charge(1);
    try {
      return eval_inner(node);
    } catch (const JinjaFault& f) {
      template_error(node.pos, f.what());
    }
  }

  CallArgs eval_args(const Node& node) {
    CallArgs args;
    for (const auto& a : node.args) args.positional.push_back(eval(*a));
    for (const auto& [k, v] : node.kwargs) args.keyword.emplace_back(k, eval(*v));
    return args;
  }

  Value apply_filter(const Node& node, const Value& subject) {
    FilterFn fn = find_filter(node.name);
    if (!fn) template_error(node.pos, cat("unknown filter '", node.name, "'"));
    CallArgs args = eval_args(node);
    try {
      return fn(subject, args, budget_);
    } catch (const JinjaFault& f) {
      template_error(node.pos, cat(node.name, " filter: ", f.what()));
    }
  }

  Value eval_inner(const Node& node) {
    switch (node.kind) {
      case NodeKind::kLiteral: return node.value;
      case NodeKind::kName: return lookup(node.name);
      case NodeKind::kList:
      case NodeKind::kTuple: {
        List items;
        for (const auto& k : node.kids) items.push_back(eval(*k));
        return node.kind == NodeKind::kTuple ? Value::tuple(std::move(items)) : Value(std::move(items));
      }
      case NodeKind::kDict: {
        Map map;
        for (size_t i = 0; i + 1 < node.kids.size(); i += 2) {
          Value key = eval(*node.kids[i]);
          if (!key.is_string()) throw JinjaFault(cat("dict keys must be strings here, not ", key.type_name()));
          map.set(key.str(), eval(*node.kids[i + 1]));
        }
        return Value(std::move(map));
      }
      case NodeKind::kGetAttr: {
        Value v = get_attr(eval(*node.kids[0]), node.name, budget_);
        return v.is_undefined() ? Value::undefined(describe(node)) : v;
      }
      case NodeKind::kGetItem: {
        Value obj = eval(*node.kids[0]);
        Value v = get_item(obj, eval(*node.kids[1]), budget_);
        return v.is_undefined() ? Value::undefined(describe(node)) : v;
      }
      case NodeKind::kSlice: {
        Value obj = eval(*node.kids[0]);
        Value parts[3];
        for (int i = 0; i < 3; ++i) parts[i] = node.kids[i + 1] ? eval(*node.kids[i + 1]) : Value::none();
        return slice(obj, parts[0], parts[1], parts[2]);
      }
      case NodeKind::kCall: {
        Value callee = eval(*node.kids[0]);
        if (callee.is_undefined()) {
          throw JinjaFault(callee.name().empty() ? std::string("cannot call an undefined value")
                                                 : cat("'", callee.name(), "' is undefined (called as a function)"));
        }
        if (!callee.is_callable()) throw JinjaFault(cat("'", callee.type_name(), "' object is not callable"));
        CallArgs args = eval_args(node);
        return callee.function()(args);
      }
      case NodeKind::kFilter: return apply_filter(node, eval(*node.kids[0]));
      case NodeKind::kTest: {
        TestFn fn = find_test(node.name);
        if (!fn) throw JinjaFault(cat("unknown test '", node.name, "'"));
        Value subject = eval(*node.kids[0]);
        CallArgs args = eval_args(node);
        bool result = fn(subject, args);
        return Value(node.negated ? !result : result);
      }
      case NodeKind::kUnary: {
        Value v = eval(*node.kids[0]);
        if (node.name == "not") return Value(!v.truthy());
        if (node.name == "-") return negate(v);
        if (!v.is_number()) throw JinjaFault(cat("bad operand type for unary +: '", v.type_name(), "'"));
        return v;
      }
      case NodeKind::kBinary: {
        Value left = eval(*node.kids[0]);
        if (node.name == "and") return left.truthy() ? eval(*node.kids[1]) : left;
        if (node.name == "or") return left.truthy() ? left : eval(*node.kids[1]);
        return binary_op(node.name, left, eval(*node.kids[1]), budget_);
      }
      case NodeKind::kCompare: {
        Value left = eval(*node.kids[0]);
        for (size_t i = 0; i < node.ops.size(); ++i) {
          Value right = eval(*node.kids[i + 1]);
          if (!compare(node.ops[i], left, right)) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case NodeKind::kCondExpr: {
        if (eval(*node.kids[1]).truthy()) return eval(*node.kids[0]);
        return node.kids[2] ? eval(*node.kids[2]) : Value::undefined();
      }
      default: throw JinjaFault("statement used as an expression");
    }
  }

  Budget budget_;
  Map root_;
  std::vector<Frame> frames_;
  size_t floor_ = 0;  // frames below this index are hidden (the caller's scopes inside a macro)
  int depth_ = 0;
  std::string out_;
  size_t held_bytes_ = 0;  // output of enclosing captures, set aside while a capture runs
};

}  // namespace

Template::Template(const std::string& source) : source_(source) {
  NodePtr root = parse_template(source);
  validate(*root);
  root_ = std::shared_ptr<const Node>(std::move(root));
}

std::string Template::render(const Map& variables, const RenderBounds& bounds) const {
  Interpreter interpreter(variables, bounds);
  return interpreter.run(*root_);
}

}  // namespace kestrel::chat
