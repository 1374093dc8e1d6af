// Hugging Face tokenizer.json (+ tokenizer_config.json) -> TokenizerData, the same fields the
// GGUF converter writes as tokenizer.ggml.*, so one tokenizer implementation serves both.
//
// Recognised: model "BPE" with a byte-level pre-tokenizer (GPT-2, SmolLM/StarCoder digits, the
// Llama 3 and Qwen2 split regexes) -> "gpt2"; model "BPE" with byte_fallback (Llama 2 style
// SentencePiece converted by transformers) -> "llama", whose scores are derived from the merge
// ranks (score = -rank of the merge that forms the token), which makes the highest-score pair
// merge the lowest-rank one, as HF's BPE does.
#include <nlohmann/json.hpp>

#include "models/tokenizer/tokenizer.h"

namespace tessera {

using json = nlohmann::json;

namespace {

const json* field(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

// Flattens a pre_tokenizer (possibly a Sequence) into its steps.
void flatten(const json& p, std::vector<const json*>& out) {
  const json* type = field(p, "type");
  if (type && type->is_string() && type->get<std::string>() == "Sequence") {
    if (const json* s = field(p, "pretokenizers"); s && s->is_array())
      for (const json& x : *s) flatten(x, out);
    return;
  }
  out.push_back(&p);
}

std::string type_of(const json& j) {
  const json* t = field(j, "type");
  return t && t->is_string() ? t->get<std::string>() : "";
}

// The GGUF pre-tokenizer name for a byte-level BPE tokenizer.json's pre_tokenizer.
Result<std::string> byte_level_pre(const json* pre) {
  if (!pre) return std::string("gpt2");
  std::vector<const json*> steps;
  flatten(*pre, steps);
  bool digits = false, byte_regex = false;
  std::string split;
  for (const json* s : steps) {
    const std::string t = type_of(*s);
    if (t == "Digits") {
      const json* ind = field(*s, "individual_digits");
      digits = ind && ind->is_boolean() && ind->get<bool>();
    } else if (t == "ByteLevel") {
      const json* r = field(*s, "use_regex");
      byte_regex = !r || (r->is_boolean() && r->get<bool>());
    } else if (t == "Split") {
      const json* pat = field(*s, "pattern");
      const json* re = pat ? field(*pat, "Regex") : nullptr;
      if (re && re->is_string()) split = re->get<std::string>();
    }
  }
  if (!split.empty()) {
    // o200k (gpt-oss, GPT-4o): upper- and lower-case runs split apart; before llama-bpe, whose
    // \p{N}{1,3} it shares.
    if (split.find("[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]") != std::string::npos) return std::string("gpt-4o");
    if (split.find("\\p{N}{1,3}") != std::string::npos) return std::string("llama-bpe");
    if (split.find("\\p{N}") != std::string::npos && split.find("[^\\r\\n\\p{L}\\p{N}]?\\p{L}+") != std::string::npos)
      return std::string("qwen2");
    // Qwen3.5: letters with their combining marks ([\p{L}\p{M}]+), single digits.
    if (split.find("\\p{N}|") != std::string::npos &&
        split.find("[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+") != std::string::npos)
      return std::string("qwen35");
    return Unimplemented("tokenizer.json: pre_tokenizer Split regex '" + split.substr(0, 120) + "' is not supported");
  }
  if (digits && byte_regex) return std::string("smollm");
  if (byte_regex && steps.size() == 1) return std::string("gpt2");
  return Unimplemented("tokenizer.json: pre_tokenizer " + pre->dump().substr(0, 200) + " is not supported");
}

// A special-token entry of tokenizer_config.json: "text" or {"content": "text", ...}.
Status hole(size_t id, size_t max_ids) {
  return InvalidArgument("tokenizer.json: token id " + std::to_string(id) + " leaves a hole in the ids (the file has " +
                         std::to_string(max_ids) + " vocab and added entries)");
}

std::string token_text(const json* v) {
  if (!v) return "";
  if (v->is_string()) return v->get<std::string>();
  if (const json* c = field(*v, "content"); c && c->is_string()) return c->get<std::string>();
  return "";
}

// |max_ids|: how many ids the file can name without a hole (its vocab plus added entries). A
// larger id is an error before the token table grows to it, so a short file cannot make us
// allocate 2^24 strings.
Status read_vocab(const json& model, size_t max_ids, TokenizerData* d) {
  const json* vocab = field(model, "vocab");
  if (!vocab || !vocab->is_object()) return InvalidArgument("tokenizer.json: model.vocab is missing or not an object");
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 || it.value().get<int64_t>() > (int64_t{1} << 24))
      return InvalidArgument("tokenizer.json: model.vocab['" + it.key() + "'] is not a token id in [0, 2^24]");
    const size_t id = size_t(it.value().get<int64_t>());
    if (id >= max_ids) return hole(id, max_ids);
    if (id >= d->tokens.size()) d->tokens.resize(id + 1);
    if (!d->tokens[id].empty()) return InvalidArgument("tokenizer.json: token id " + std::to_string(id) + " appears twice in model.vocab");
    d->tokens[id] = it.key();
  }
  if (const json* merges = field(model, "merges")) {
    if (!merges->is_array()) return InvalidArgument("tokenizer.json: model.merges is not an array");
    for (const json& m : *merges) {
      if (m.is_string()) {
        d->merges.push_back(m.get<std::string>());
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        d->merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
      } else {
        return InvalidArgument("tokenizer.json: merge " + m.dump().substr(0, 80) + " is neither \"a b\" nor [\"a\", \"b\"]");
      }
    }
  }
  return OkStatus();
}

Status read_added(const json& root, size_t max_ids, TokenizerData* d) {
  const json* added = field(root, "added_tokens");
  if (!added) return OkStatus();
  if (!added->is_array()) return InvalidArgument("tokenizer.json: added_tokens is not an array");
  for (const json& a : *added) {
    const json* id = field(a, "id");
    const json* content = field(a, "content");
    if (!id || !id->is_number_integer() || id->get<int64_t>() < 0 || id->get<int64_t>() > (int64_t{1} << 24) || !content ||
        !content->is_string())
      return InvalidArgument("tokenizer.json: added token " + a.dump().substr(0, 120) + " needs an id and a content");
    const size_t i = size_t(id->get<int64_t>());
    if (i >= max_ids) return hole(i, max_ids);
    if (i >= d->tokens.size()) d->tokens.resize(i + 1);
    if (!d->tokens[i].empty() && d->tokens[i] != content->get<std::string>())
      return InvalidArgument("tokenizer.json: added token " + std::to_string(i) + " '" + content->get<std::string>() +
                             "' differs from the vocabulary's '" + d->tokens[i] + "'");
    d->tokens[i] = content->get<std::string>();
    d->token_types.resize(d->tokens.size(), kTokenNormal);
    const json* special = field(a, "special");
    d->token_types[i] = special && special->is_boolean() && special->get<bool>() ? kTokenControl : kTokenUserDefined;
  }
  return OkStatus();
}

// A WordPiece tokenizer.json in the GGUF spelling our "bert" tokenizer reads (as llama.cpp's
// converter writes it): a piece that continues a word loses its "##", a word-initial piece gains
// "▁", and bracketed specials ([CLS], [unused0]) stay as they are. The template
// "[CLS] $A [SEP]" of BertProcessing / TemplateProcessing gives BOS and EOS.
Status wordpiece_vocab(const json& root, const json& model, TokenizerData* d) {
  if (const json* norm = field(root, "normalizer")) {
    const json* lower = field(*norm, "lowercase");
    if (type_of(*norm) == "BertNormalizer" && lower && lower->is_boolean() && !lower->get<bool>())
      return Unimplemented("tokenizer.json: a cased WordPiece vocabulary (BertNormalizer lowercase: false) is not supported");
  }
  std::string prefix = "##";
  if (const json* p = field(model, "continuing_subword_prefix"); p && p->is_string()) prefix = p->get<std::string>();
  d->model = "bert";
  for (size_t i = 0; i < d->tokens.size(); ++i) {
    std::string& t = d->tokens[i];
    if (d->token_types[i] == kTokenControl || (t.size() > 2 && t.front() == '[' && t.back() == ']')) continue;
    if (!prefix.empty() && t.size() > prefix.size() && t.compare(0, prefix.size(), prefix) == 0) t = t.substr(prefix.size());
    else t = "\xE2\x96\x81" + t;
  }
  const json* pp = field(root, "post_processor");
  const std::string post = pp ? pp->dump() : "";
  auto id_of = [&](const char* text) {
    for (size_t i = 0; i < d->tokens.size(); ++i)
      if (d->tokens[i] == text) return int32_t(i);
    return int32_t(-1);
  };
  d->bos = id_of("[CLS]");
  d->eos = id_of("[SEP]");
  d->pad = id_of("[PAD]");
  d->add_bos = d->bos >= 0 && post.find("[CLS]") != std::string::npos;
  d->add_eos = d->eos >= 0 && post.find("[SEP]") != std::string::npos;
  return OkStatus();
}

// SentencePiece-style scores from merge ranks (see the file comment).
void spm_scores(TokenizerData* d) {
  std::unordered_map<std::string, size_t> rank_of;
  for (size_t r = 0; r < d->merges.size(); ++r) {
    const std::string& m = d->merges[r];
    const size_t sp = m.find(' ');
    if (sp == std::string::npos) continue;
    rank_of.emplace(m.substr(0, sp) + m.substr(sp + 1), r);
  }
  d->scores.assign(d->tokens.size(), 0.0f);
  for (size_t i = 0; i < d->tokens.size(); ++i) {
    auto it = rank_of.find(d->tokens[i]);
    // Tokens no merge forms (characters, bytes) score below every merged token.
    d->scores[i] = it == rank_of.end() ? -1e9f : -float(it->second);
    if (d->tokens[i].size() == 6 && d->tokens[i].rfind("<0x", 0) == 0 && d->token_types[i] == kTokenNormal)
      d->token_types[i] = kTokenByte;
  }
  d->merges.clear();
}

}  // namespace

Result<TokenizerData> tokenizer_data_from_hf_json(std::string_view tokenizer_json, std::string_view config_json,
                                                  std::string* chat_template) {
  TokenizerData d;
  const json root = json::parse(tokenizer_json.begin(), tokenizer_json.end(), nullptr, false);
  if (root.is_discarded() || !root.is_object()) return InvalidArgument("tokenizer.json: not a JSON object");
  const json* model = field(root, "model");
  if (!model || !model->is_object()) return InvalidArgument("tokenizer.json: 'model' is missing");
  const std::string mtype = type_of(*model);
  if (mtype != "BPE" && mtype != "WordPiece")
    return Unimplemented("tokenizer.json: model type '" + mtype + "' is not supported (BPE, WordPiece)");
  const json* vocab = field(*model, "vocab");
  const json* added = field(root, "added_tokens");
  const size_t max_ids = (vocab && vocab->is_object() ? vocab->size() : 0) + (added && added->is_array() ? added->size() : 0);
  TS_RETURN_IF_ERROR(read_vocab(*model, max_ids, &d));
  d.token_types.assign(d.tokens.size(), kTokenNormal);
  TS_RETURN_IF_ERROR(read_added(root, max_ids, &d));
  for (size_t i = 0; i < d.tokens.size(); ++i)
    if (d.tokens[i].empty()) return InvalidArgument("tokenizer.json: token id " + std::to_string(i) + " has no text (a hole in the ids)");
  const json* fallback = field(*model, "byte_fallback");
  const bool spm = fallback && fallback->is_boolean() && fallback->get<bool>();
  if (mtype == "WordPiece") {
    TS_RETURN_IF_ERROR(wordpiece_vocab(root, *model, &d));
  } else if (spm) {
    d.model = "llama";
    spm_scores(&d);
    // transformers' Llama converter prepends "▁" in the normalizer (or a Metaspace pre-tokenizer).
    const std::string norm = field(root, "normalizer") ? field(root, "normalizer")->dump() : "";
    const std::string pre = field(root, "pre_tokenizer") ? field(root, "pre_tokenizer")->dump() : "";
    d.add_space_prefix = norm.find("Prepend") != std::string::npos || pre.find("Metaspace") != std::string::npos;
    d.add_bos = true;
  } else {
    d.model = "gpt2";
    TS_ASSIGN_OR_RETURN(d.pre, byte_level_pre(field(root, "pre_tokenizer")));
    // Llama 3 style: the post-processor's template starts with a special token (BOS).
    if (const json* pp = field(root, "post_processor")) d.add_bos = pp->dump().find("\"SpecialToken\"") != std::string::npos &&
                                                                     pp->dump().find("TemplateProcessing") != std::string::npos;
  }
  auto id_of = [&](const std::string& text) -> int32_t {
    for (size_t i = 0; i < d.tokens.size(); ++i)
      if (d.tokens[i] == text) return int32_t(i);
    return -1;
  };
  if (const json* unk = field(*model, "unk_token"); unk && unk->is_string()) d.unk = id_of(unk->get<std::string>());
  chat_template->clear();
  if (!config_json.empty()) {
    const json cfg = json::parse(config_json.begin(), config_json.end(), nullptr, false);
    if (cfg.is_discarded() || !cfg.is_object()) return InvalidArgument("tokenizer_config.json: not a JSON object");
    struct Special {
      const char* key;
      int32_t* id;
    };
    for (const Special& s : {Special{"bos_token", &d.bos}, Special{"eos_token", &d.eos}, Special{"unk_token", &d.unk},
                             Special{"pad_token", &d.pad}}) {
      const std::string text = token_text(field(cfg, s.key));
      if (text.empty()) continue;
      *s.id = id_of(text);
      if (*s.id < 0) return InvalidArgument("tokenizer_config.json: " + std::string(s.key) + " '" + text + "' is not in the vocabulary");
    }
    if (const json* b = field(cfg, "add_bos_token"); b && b->is_boolean()) d.add_bos = b->get<bool>();
    if (const json* e = field(cfg, "add_eos_token"); e && e->is_boolean()) d.add_eos = e->get<bool>();
    if (const json* t = field(cfg, "chat_template")) {
      if (t->is_string()) {
        *chat_template = t->get<std::string>();
      } else if (t->is_array()) {  // named templates: take "default"
        for (const json& x : *t)
          if (token_text(field(x, "name")) == "default" && field(x, "template") && field(x, "template")->is_string())
            *chat_template = field(x, "template")->get<std::string>();
      }
    }
  }
  return d;
}

}  // namespace tessera
