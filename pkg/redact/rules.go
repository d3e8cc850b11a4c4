package redact

import (
	"encoding/base64"
	"regexp"
	"strings"
	"unicode/utf8"
)

// textRule is a rule that finds secrets in text: a built-in or an
// operator's pattern.
type textRule struct {
	name string
	// re finds a match. A built-in rule's is anchored (\A): it runs only
	// where one of its anchors is, so that text without any costs a few
	// literal searches and no regular expression at all. An operator's
	// pattern has no anchors and runs over the whole text.
	re *regexp.Regexp
	// group is the submatch replaced; 0 is the whole match. A rule that
	// keeps its context (the "Bearer " before a token, the user before a
	// URL's password) replaces only the secret.
	group int
	// anchors are literals of which text must hold one for the rule to
	// run at all; a match starts at one (or at back's answer).
	anchors []string
	// anchorBytes are the bytes of each anchor: one that a text lacks is
	// not looked for (compiled sets them).
	anchorBytes [maxAnchors]byteSet
	// back, when set, is where a match found by the anchor at at starts:
	// the scheme before a URL's "://".
	back func(s string, at int) int
	// scan, when set, is the rule instead of re: the span replaced for
	// the anchor at at, start -1 for none.
	scan func(s string, at int) (start, end int)
	// word says a match starts a word: it does not follow a letter, a
	// digit or an underscore (\b, which an anchored expression cannot see
	// before its start).
	word bool
	// valid, when set, must accept the replaced text: what a regular
	// expression cannot say cheaply (a token holds a digit).
	valid func(string) bool
}

// The names of the built-in rules, in the order they run. The order puts
// the rules of whole structures first (a private key block, a URL's
// userinfo) and a provider's specific shape before a generic one, so that
// the marker names the most precise rule: an Anthropic key is not counted
// as an OpenAI key, nor a JWT after "Bearer" as a bearer token.
const (
	RulePrivateKey       = "private_key"
	RuleURLPassword      = "url_password"
	RuleAnthropicKey     = "anthropic_key"
	RuleOpenAIKey        = "openai_key"
	RuleGitHubToken      = "github_token"
	RuleSlackToken       = "slack_token"
	RuleAWSAccessKey     = "aws_access_key"
	RuleGoogleAPIKey     = "google_api_key"
	RuleJWT              = "jwt"
	RuleBearerToken      = "bearer_token"
	RuleBasicAuth        = "basic_auth"
	RuleSecretAssignment = "secret_assignment"
)

// RuleOverflow names the replacement of a whole text whose redaction did
// not settle within its field's limit in a few passes (an operator's
// pattern that keeps matching what its replacement exposes): the field
// becomes "[redacted:overflow]" rather than risk leaving a secret.
const RuleOverflow = "overflow"

// builtins are the built-in rules, in the order they run.
var builtins = []textRule{
	{
		// A PEM or PGP private key block, to its end, or to the end of the
		// text when it was cut before its END line.
		name:    RulePrivateKey,
		re:      regexp.MustCompile(`\A-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----(?s:.*?)(?:-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\z)`),
		anchors: []string{"-----BEGIN"},
	},
	{
		// scheme://user:password@host: the password only.
		name:    RuleURLPassword,
		re:      regexp.MustCompile(`\A[A-Za-z][A-Za-z0-9+.-]{0,30}://[^\s:/@]*:([^\s/@]+)@`),
		group:   1,
		anchors: []string{"://"},
		back:    schemeStart,
	},
	{
		name:    RuleAnthropicKey,
		re:      regexp.MustCompile(`\Ask-ant-[A-Za-z0-9_-]{20,}`),
		anchors: []string{"sk-ant-"},
		word:    true,
	},
	{
		// sk-..., sk-proj-..., sk-svcacct-...: random, so with a digit; a
		// hyphenated phrase that starts with "sk-" has none.
		name:    RuleOpenAIKey,
		re:      regexp.MustCompile(`\Ask-[A-Za-z0-9_-]{20,}`),
		anchors: []string{"sk-"},
		word:    true,
		valid:   hasDigit,
	},
	{
		// Personal, OAuth, user-to-server, server-to-server and refresh
		// tokens, and fine-grained personal access tokens.
		name:    RuleGitHubToken,
		re:      regexp.MustCompile(`\A(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})`),
		anchors: []string{"ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"},
		word:    true,
	},
	{
		// Bot, user, app, refresh, configuration and legacy tokens:
		// xoxb-, xoxp-, xoxa-, xoxr-, xoxe-, xoxs-, numbered.
		name:    RuleSlackToken,
		re:      regexp.MustCompile(`\Axox[abprse]-[A-Za-z0-9-]{10,}`),
		anchors: []string{"xox"},
		word:    true,
		valid:   hasDigit,
	},
	{
		// Access key ids, long-term (AKIA) and temporary (ASIA), and the
		// other key id prefixes of IAM.
		name:    RuleAWSAccessKey,
		re:      regexp.MustCompile(`\A(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b`),
		anchors: []string{"AKIA", "ASIA", "ABIA", "ACCA"},
		word:    true,
	},
	{
		name:    RuleGoogleAPIKey,
		re:      regexp.MustCompile(`\AAIza[0-9A-Za-z_-]{35}`),
		anchors: []string{"AIza"},
		word:    true,
	},
	{
		// A JSON Web Token: a header and claims, both JSON objects
		// ({" in base64url is eyJ), and a signature, maybe empty.
		name:    RuleJWT,
		re:      regexp.MustCompile(`\AeyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*`),
		anchors: []string{"eyJ"},
		word:    true,
	},
	{
		// "Bearer <token>", the token only; a token is random, so it has a
		// digit, where "bearer of bad news" has none. Bearer, bearer or
		// BEARER, as HTTP clients and people write it.
		name:    RuleBearerToken,
		re:      regexp.MustCompile(`\A(?i:bearer)\s+([A-Za-z0-9._~+/-]{16,}=*)`),
		group:   1,
		anchors: []string{"Bearer", "bearer", "BEARER"},
		word:    true,
		valid:   hasDigit,
	},
	{
		// "Basic <base64 of user:password>", the credentials only, when
		// they decode to text with a colon.
		name:    RuleBasicAuth,
		re:      regexp.MustCompile(`\A(?i:basic)\s+([A-Za-z0-9+/]{4,}={0,2})`),
		group:   1,
		anchors: []string{"Basic", "basic", "BASIC"},
		word:    true,
		valid:   basicCredentials,
	},
	{
		// password=..., api_key: ..., client_secret="...", token=... as
		// command lines, environment and configuration write them, with
		// any prefix (DB_PASSWORD, --db-password, accessToken): the value
		// only. Found from the ":" or "=", back to the name before it.
		name:    RuleSecretAssignment,
		anchors: []string{":", "="},
		scan:    assignedSecret,
	},
}

// BuiltinRules returns the names of the built-in rules, in the order they
// run.
func BuiltinRules() []string {
	out := make([]string, len(builtins))
	for i, r := range builtins {
		out[i] = r.name
	}
	return out
}

func hasDigit(s string) bool {
	return strings.ContainsAny(s, "0123456789")
}

// basicCredentials reports whether s is base64 of text holding a colon,
// as HTTP Basic credentials are.
func basicCredentials(s string) bool {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		if b, err = base64.RawStdEncoding.DecodeString(s); err != nil {
			return false
		}
	}
	return utf8.Valid(b) && strings.IndexByte(string(b), ':') > 0
}

// schemeStart is where the URL whose "://" is at at starts: the first
// letter of the scheme before it.
func schemeStart(s string, at int) int {
	i := at
	for i > 0 && at-i < 32 && isSchemeByte(s[i-1]) {
		i--
	}
	for i < at && !isLetter(s[i]) {
		i++
	}
	return i
}

// secretNames are the ends of the names whose value secret_assignment
// redacts, lower-case, without '_' and '-': password, db_password,
// client_secret, api_key, accessToken...
var secretNames = []string{"password", "passwd", "secret", "token", "apikey", "accesskey", "secretkey", "privatekey"}

// assignedSecret is the value assigned at at (a ':' or '=') to a name
// that ends in one of secretNames: after blanks and a quote, up to a
// blank, a quote, '&', ';' or ',', at least 3 bytes.
func assignedSecret(s string, at int) (start, end int) {
	i := at
	for i > 0 && (s[i-1] == ' ' || s[i-1] == '\t') {
		i--
	}
	if i > 0 && (s[i-1] == '"' || s[i-1] == '\'') {
		i--
	}
	// The name's last letters, lower-case, without '_' and '-'.
	var buf [16]byte
	k := len(buf)
	for i > 0 && k > 0 && (isWordByte(s[i-1]) || s[i-1] == '-') {
		i--
		switch c := s[i]; {
		case c == '_' || c == '-':
		case 'A' <= c && c <= 'Z':
			k--
			buf[k] = c + 'a' - 'A'
		default:
			k--
			buf[k] = c
		}
	}
	secret := false
	for _, n := range secretNames {
		if len(buf)-k >= len(n) && string(buf[len(buf)-len(n):]) == n {
			secret = true
			break
		}
	}
	if !secret {
		return -1, 0
	}
	j := at + 1
	for j < len(s) && (s[j] == ' ' || s[j] == '\t') {
		j++
	}
	if j < len(s) && (s[j] == '"' || s[j] == '\'') {
		j++
	}
	start = j
	for j < len(s) && !strings.ContainsRune(" \t\n\r\f\v\"'&;,", rune(s[j])) {
		j++
	}
	if j-start < 3 {
		return -1, 0
	}
	return start, j
}

func isLetter(b byte) bool { return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' }

func isWordByte(b byte) bool { return isLetter(b) || '0' <= b && b <= '9' || b == '_' }

func isSchemeByte(b byte) bool { return isWordByte(b) && b != '_' || b == '+' || b == '.' || b == '-' }

// maxAnchors bounds a rule's anchors, so that finding them needs no
// allocation.
const maxAnchors = 8

// find calls found with the span of each of r's matches in s (the
// replaced group's), in order and apart; present are the bytes of s.
func (r *textRule) find(s string, present *byteSet, found func(start, end int)) {
	if len(r.anchors) == 0 {
		for _, m := range r.re.FindAllStringSubmatchIndex(s, -1) {
			found(m[2*r.group], m[2*r.group+1])
		}
		return
	}
	// next[k] is where anchor k is next found at or after from; len(s)+1
	// when it is not.
	var next [maxAnchors]int
	any := false
	for k := range r.anchors {
		if present.holds(&r.anchorBytes[k]) {
			next[k] = -1
			any = true
		} else {
			next[k] = len(s) + 1 // not in s: no need to look
		}
	}
	if !any {
		return
	}
	from, done := 0, 0 // done: where the last match ended
	for {
		at := len(s) + 1
		for k, a := range r.anchors {
			if next[k] < from {
				next[k] = len(s) + 1
				if i := strings.Index(s[from:], a); i >= 0 {
					next[k] = from + i
				}
			}
			at = min(at, next[k])
		}
		if at > len(s) {
			return
		}
		from = at + 1
		if r.scan != nil {
			if start, end := r.scan(s, at); start >= done {
				found(start, end)
				done = end
				from = max(from, done)
			}
			continue
		}
		start := at
		if r.back != nil {
			start = r.back(s, at)
		}
		if start < done || r.word && start > 0 && isWordByte(s[start-1]) {
			continue
		}
		m := r.match(s[start:])
		if m == nil || m[2*r.group] < 0 {
			continue
		}
		found(start+m[2*r.group], start+m[2*r.group+1])
		done = start + m[1]
		from = max(from, done)
	}
}

// window is how much of the text after an anchor an anchored expression
// is first run on: the cost of a try is proportional to what it is given,
// and a secret is short.
const window = 256

// match runs r's anchored expression on s, the text from a match's
// possible start: on its first window bytes, then on all of it when the
// match reached their end (a longer token, a private key block).
func (r *textRule) match(s string) []int {
	if len(s) <= window {
		return r.re.FindStringSubmatchIndex(s)
	}
	m := r.re.FindStringSubmatchIndex(s[:window])
	if m != nil && m[1] < window {
		return m
	}
	return r.re.FindStringSubmatchIndex(s)
}

// byteSet is a set of bytes.
type byteSet [4]uint64

// bytesOf is the set of the bytes of s: one pass, so that the anchors
// whose bytes s lacks cost nothing more.
func bytesOf(s string) byteSet {
	var set byteSet
	for i := 0; i < len(s); i++ {
		set[s[i]>>6] |= 1 << (s[i] & 63)
	}
	return set
}

// holds reports whether set has every byte of sub.
func (set *byteSet) holds(sub *byteSet) bool {
	return set[0]&sub[0] == sub[0] && set[1]&sub[1] == sub[1] && set[2]&sub[2] == sub[2] && set[3]&sub[3] == sub[3]
}

// compiled is r with its anchors' bytes set.
func (r textRule) compiled() textRule {
	if len(r.anchors) > maxAnchors {
		panic("redact: a rule with more than maxAnchors anchors") // the built-in rules are this file's
	}
	for k, a := range r.anchors {
		r.anchorBytes[k] = bytesOf(a)
	}
	return r
}
