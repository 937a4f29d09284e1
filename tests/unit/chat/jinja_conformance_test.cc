// Replays tests/data/chat/jinja_cases.json: templates rendered by real Jinja2 in transformers'
// chat-template environment (tools/make_jinja_cases.py). kestrel must render the same text, or
// raise an error with a template position where Jinja raised.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "chat/template.h"
#include "core/error.h"
#include "core/files.h"
#include "support/paths.h"

namespace kestrel::chat {
namespace {

using ojson = nlohmann::ordered_json;

TEST(JinjaConformance, MatchesJinja2) {
  ojson data = ojson::parse(read_file(test::data_path("chat/jinja_cases.json")));
  ASSERT_GT(data["cases"].size(), 100u);
  for (const auto& c : data["cases"]) {
    std::string name = c["name"].get<std::string>();
    std::string source = c["template"].get<std::string>();
    SCOPED_TRACE(name + ": " + source);
    Value vars = from_json(c["variables"]);
    try {
      std::string out = Template(source).render(vars.map());
      if (c.contains("rendered")) {
        EXPECT_EQ(out, c["rendered"].get<std::string>());
      } else {
        ADD_FAILURE() << "Jinja raised " << c["error"].get<std::string>() << " but kestrel rendered: " << out;
      }
    } catch (const Error& e) {
      if (c.contains("rendered")) {
        ADD_FAILURE() << "kestrel raised " << e.what() << " but Jinja rendered: " << c["rendered"].get<std::string>();
        continue;
      }
      EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
      std::string what = e.what();
      EXPECT_EQ(what.rfind("chat template line ", 0), 0u) << what;
      std::string jinja_error = c["error"].get<std::string>();
      if (jinja_error.rfind("TemplateError: ", 0) == 0) {  // raise_exception: the message must come through
        EXPECT_NE(what.find(jinja_error.substr(15)), std::string::npos) << what;
      }
    }
  }
}

}  // namespace
}  // namespace kestrel::chat
