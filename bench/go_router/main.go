// A stand-in for vLLM Semantic Router's routing preview, for bench/driver_overhead.py and
// bench/compare_builds.py: Go's net/http, as the router serves it, waiting --delay before each
// answer and answering a JSON body shaped like the router's preview answer (original_text,
// decision_result, metrics per signal with execution_time_ms and confidence, ...), about 3 KB:
// more than net/http buffers before it chooses a framing, so Go sends it chunked. --small
// answers about 100 bytes instead, which Go sends with a Content-Length.
//
//	go run . --port 0 --url-file router.url [--delay 2ms] [--small]
//
// Not the router: no classification, no admission gate; only its answer's shape and framing.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"
)

type signal struct {
	ExecutionTimeMs float64 `json:"execution_time_ms"`
	Confidence      float64 `json:"confidence"`
}

// the router's SignalMetricsCollection, in its field order: every signal type, always present
var signalNames = []string{"keyword", "embedding", "domain", "fact_check", "user_feedback",
	"reask", "preference", "language", "context", "structure", "complexity", "modality", "authz",
	"jailbreak", "safety", "pii", "kb", "conversation", "event", "metadata", "classifier",
	"input_modality"}

type matchedSignals struct {
	Keywords   []string `json:"keywords,omitempty"`
	Embeddings []string `json:"embeddings,omitempty"`
	Domains    []string `json:"domains,omitempty"`
	Languages  []string `json:"languages,omitempty"`
	Complexity []string `json:"complexity,omitempty"`
}

type decisionResult struct {
	DecisionName     string         `json:"decision_name"`
	Algorithm        string         `json:"algorithm,omitempty"`
	Plugins          []string       `json:"plugins,omitempty"`
	UsedSignals      matchedSignals `json:"used_signals"`
	MatchedSignals   matchedSignals `json:"matched_signals"`
	UnmatchedSignals matchedSignals `json:"unmatched_signals"`
}

// the preview answer's fields in the router's order (its EvalResponse struct; eval_trace only
// comes with ?trace=true)
type previewAnswer struct {
	OriginalText      string             `json:"original_text"`
	RequestedModel    string             `json:"requested_model,omitempty"`
	DecisionResult    decisionResult     `json:"decision_result"`
	RecommendedModels []string           `json:"recommended_models,omitempty"`
	SelectedModel     string             `json:"selected_model,omitempty"`
	SelectionStatus   string             `json:"selection_status,omitempty"`
	SelectionMethod   string             `json:"selection_method,omitempty"`
	SelectionReason   string             `json:"selection_reason,omitempty"`
	RoutingDecision   string             `json:"routing_decision,omitempty"`
	Metrics           json.RawMessage    `json:"metrics"`
	SignalConfidences map[string]float64 `json:"signal_confidences,omitempty"`
	SignalValues      map[string]float64 `json:"signal_values,omitempty"`
	SignalErrors      map[string]string  `json:"signal_errors,omitempty"`
	ConfigHash        string             `json:"config_hash,omitempty"`
}

const configHash = "3f0c2d9a7b1e4c5d6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6"

var confidenceKeys = []string{"keyword:math_keywords", "keyword:code_keywords",
	"embedding:math_topics", "embedding:code_topics", "domain:math", "domain:physics",
	"domain:computer_science", "domain:other", "language:en", "complexity:low",
	"complexity:high", "structure:many_questions", "preference:concise", "modality:text",
	"jailbreak:default", "pii:default"}

// answer n's times and confidences differ per request, as the router's do
func answer(text string, n uint64) previewAnswer {
	metrics := []byte{'{'}
	for i, name := range signalNames {
		if i > 0 {
			metrics = append(metrics, ',')
		}
		value, _ := json.Marshal(signal{float64((n*7919+uint64(i)*104729)%40000) / 1000,
			float64((n*31+uint64(i)*17)%10000) / 10000})
		metrics = append(append(append(metrics, '"'), name...), '"', ':')
		metrics = append(metrics, value...)
	}
	metrics = append(metrics, '}')
	confidences := map[string]float64{}
	for i, name := range confidenceKeys {
		confidences[name] = float64((n*13+uint64(i)*7)%10000) / 10000
	}
	return previewAnswer{
		OriginalText:   text,
		RequestedModel: "MoM",
		DecisionResult: decisionResult{"math", "priority", []string{"semantic-cache"},
			matchedSignals{[]string{"math_keywords"}, []string{"math_topics"}, []string{"math"},
				[]string{"en"}, []string{"low"}},
			matchedSignals{[]string{"math_keywords"}, nil, []string{"math"}, []string{"en"}, nil},
			matchedSignals{nil, []string{"math_topics"}, nil, nil, []string{"low"}}},
		RecommendedModels: []string{"qwen3", "llama-3.1-8b"},
		SelectedModel:     "qwen3",
		SelectionStatus:   "selected",
		SelectionMethod:   "static",
		SelectionReason:   "decision math prefers qwen3",
		RoutingDecision:   "math",
		Metrics:           metrics,
		SignalConfidences: confidences,
		SignalValues:      map[string]float64{"structure:many_questions": float64(n % 5)},
		SignalErrors:      map[string]string{"fact_check:default": "classifier not loaded"},
		ConfigHash:        configHash,
	}
}

func main() {
	port := flag.Int("port", 0, "port on 127.0.0.1 (0: any free one)")
	urlFile := flag.String("url-file", "", "write the base URL here once listening")
	delay := flag.Duration("delay", 2*time.Millisecond, "wait before each answer")
	small := flag.Bool("small", false, "answer about 100 bytes (sent with a Content-Length)")
	flag.Parse()
	var count uint64
	http.HandleFunc("/api/v1/routing/preview", func(w http.ResponseWriter, r *http.Request) {
		var request struct {
			Messages []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&request); err != nil {
			http.Error(w, `{"error":{"code":"INVALID_INPUT","message":"bad json"}}`, 400)
			return
		}
		text := ""
		if len(request.Messages) > 0 {
			text = request.Messages[0].Content
		}
		time.Sleep(*delay)
		n := atomic.AddUint64(&count, 1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Vsr-Config-Hash", configHash)
		if *small {
			fmt.Fprintf(w, `{"original_text":%q,"decision_result":{"decision_name":"math"},"selected_model":"qwen3"}`+"\n", text)
			return
		}
		json.NewEncoder(w).Encode(answer(text, n))
	})
	listener, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", *port))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if *urlFile != "" {
		os.WriteFile(*urlFile, []byte("http://"+listener.Addr().String()+"\n"), 0o644)
	}
	server := &http.Server{IdleTimeout: 60 * time.Second}
	server.Serve(listener)
}
