package acc

/*
#cgo pkg-config: acc
#include <acc/acc.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>

extern int32_t accGoTextPiece(uintptr_t user, char* piece, size_t length);

static int32_t accgo_text_piece(void* user, const char* piece, size_t length) {
	return accGoTextPiece((uintptr_t)user, (char*)piece, length);
}

// Generates and, on failure, copies the message within the same C call (see generate.go). user 0: no
// callback.
static acc_status accgo_generate_text(uintptr_t model, uintptr_t tok, const char* prompt, const char* options,
                                      uintptr_t user, char** out, char* msg, size_t cap) {
	acc_status st = acc_generate_text((acc_model*)model, (const acc_tokenizer*)tok, prompt, options,
	                                  user ? accgo_text_piece : NULL, (void*)user, out);
	if (st != ACC_OK) snprintf(msg, cap, "%s", acc_last_error_message());
	return st;
}
*/
import "C"

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/cgo"
	"sync"
	"unsafe"

	"github.com/libacc/libacc/bindings/go/internal/raw"
)

// Tokenizer is transformers' AutoTokenizer (the tokenizers crate inside libacc): encode, decode,
// vocabulary look-ups and chat templates.
//
// A Tokenizer is safe for concurrent use by many goroutines (data-loader workers sharing one):
// libacc's tokenizer is thread-safe, and Close and SetSpecialToken wait for the calls in flight and
// keep others out meanwhile. Close it when done.
type Tokenizer struct {
	handle
	mu sync.RWMutex // calls hold it shared; Close and SetSpecialToken alone
}

func newTokenizer(ptr uintptr, err error) (*Tokenizer, error) {
	if err != nil {
		return nil, err
	}
	t := &Tokenizer{}
	track(t, &t.handle, ptr, "Tokenizer", raw.Acc_tokenizer_destroy)
	return t, nil
}

// use returns the pointer (0 for a nil or closed tokenizer: libacc then names the NULL) with the lock
// held shared; call the returned function when the call is done.
func (t *Tokenizer) use() (uintptr, func()) {
	if t == nil {
		return 0, func() {}
	}
	t.mu.RLock()
	return t.ptr, t.mu.RUnlock
}

// TokenizerFromPretrained is AutoTokenizer.from_pretrained(dir): tokenizer.json with
// tokenizer_config.json, special_tokens_map.json and the chat templates. A folder with tokenizer.model
// only is ErrInvalidArgument, saying how to convert it; a malformed file names itself.
func TokenizerFromPretrained(dir string) (*Tokenizer, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	var out uintptr
	err := wrap(raw.Acc_tokenizer_from_pretrained(dir, &out))
	return newTokenizer(out, err)
}

// joinTexts lays texts out one after another, with their lengths (the raw calls' batch shape).
func joinTexts(texts []string) ([]byte, []int64) {
	n := 0
	for _, s := range texts {
		n += len(s)
	}
	data := make([]byte, 0, n)
	lengths := make([]int64, len(texts))
	for i, s := range texts {
		data = append(data, s...)
		lengths[i] = int64(len(s))
	}
	return data, lengths
}

// TrainBPE trains a byte-level BPE tokenizer (GPT-2 / Llama-3's kind) on texts with tokenizers'
// BpeTrainer. options (nil for the defaults; JSON text, a map or a struct): {"vocab_size": 1000,
// "min_frequency": 2, "special_tokens": [...], "bos_token", "eos_token", "pad_token", "unk_token",
// "chat_template", "model_max_length"}.
func TrainBPE(texts []string, options any) (*Tokenizer, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	opts, err := jsonText(options)
	if err != nil {
		return nil, err
	}
	data, lengths := joinTexts(texts)
	var out uintptr
	err = wrap(raw.Accx_tokenizer_train_bpe(data, lengths, opts, &out))
	return newTokenizer(out, err)
}

// Close releases the tokenizer after the calls in flight on other goroutines. Idempotent.
func (t *Tokenizer) Close() error {
	if t != nil {
		t.mu.Lock()
		defer t.mu.Unlock()
		raw.Acc_tokenizer_destroy(t.release())
	}
	return nil
}

// SavePretrained writes tokenizer.json, tokenizer_config.json and chat_template.jinja into dir
// (created if missing), which TokenizerFromPretrained and transformers' AutoTokenizer load.
func (t *Tokenizer) SavePretrained(dir string) error {
	p, done := t.use()
	defer done()
	return wrap(raw.Acc_tokenizer_save_pretrained(p, dir))
}

// TokenizerInfo is what a tokenizer is (Tokenizer.Info).
type TokenizerInfo struct {
	VocabSize        int64            `json:"vocab_size"`
	Len              int64            `json:"len"` // with the added tokens
	ModelType        string           `json:"model_type"`
	SpecialTokens    map[string]any   `json:"special_tokens"` // transformers' special_tokens_map
	SpecialTokenIDs  map[string]int64 `json:"special_token_ids"`
	AllSpecialTokens []string         `json:"all_special_tokens"`
	AllSpecialIDs    []int64          `json:"all_special_ids"`
	ChatTemplates    []string         `json:"chat_templates"`   // names
	ModelMaxLength   *uint64          `json:"model_max_length"` // nil: none
	PaddingSide      string           `json:"padding_side"`
	TruncationSide   string           `json:"truncation_side"`
	// JSON is libacc's text, for fields added later.
	JSON string `json:"-"`
}

// Info says what the tokenizer is: vocabulary size, model type, special tokens, chat templates.
func (t *Tokenizer) Info() (*TokenizerInfo, error) {
	p, done := t.use()
	defer done()
	var text string
	if err := wrap(raw.Accx_tokenizer_info(p, &text)); err != nil {
		return nil, err
	}
	info := &TokenizerInfo{JSON: text}
	if err := json.Unmarshal([]byte(text), info); err != nil {
		return nil, &Error{Code: CodeInternal, Message: fmt.Sprintf("cannot read the tokenizer's info: %v", err)}
	}
	return info, nil
}

// SetSpecialToken is transformers' `tok.pad_token = "..."`: it sets a named special token
// ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"); ""
// unsets it. It waits for the calls in flight on other goroutines.
func (t *Tokenizer) SetSpecialToken(name, token string) error {
	if t == nil {
		return wrap(raw.Accx_tokenizer_set_special_token(0, name, token))
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return wrap(raw.Accx_tokenizer_set_special_token(t.ptr, name, token))
}

// TokenToID is the id of a token of the vocabulary (added tokens included); ok is false when it has
// none.
func (t *Tokenizer) TokenToID(token string) (id int64, ok bool, err error) {
	p, done := t.use()
	defer done()
	err = wrap(raw.Accx_tokenizer_token_to_id(p, token, &id))
	return id, err == nil && id >= 0, err
}

// IDToToken is the token of an id; ok is false for an id outside the vocabulary.
func (t *Tokenizer) IDToToken(id int64) (token string, ok bool, err error) {
	p, done := t.use()
	defer done()
	err = wrap(raw.Accx_tokenizer_id_to_token(p, id, &token))
	return token, err == nil && token != "", err
}

// Encode is transformers' tok(texts, ...): one row per text (more with overflowing windows). options
// (nil for the defaults; JSON text, a map or a struct): {"add_special_tokens": true, "truncation",
// "max_length", "stride", "return_overflowing_tokens", "padding": false | true | "longest" |
// "max_length", "pad_to_multiple_of", "padding_side", "truncation_side", "threads": 1}. Invalid UTF-8
// is ErrInvalidArgument naming the text and byte. Close the encoding when done.
func (t *Tokenizer) Encode(texts []string, options any) (*Encoding, error) {
	return t.encode(texts, nil, options)
}

// EncodePairs is tok(texts, text_pair=pairs, ...), as many pairs as texts.
func (t *Tokenizer) EncodePairs(texts, pairs []string, options any) (*Encoding, error) {
	if pairs == nil {
		pairs = []string{}
	}
	return t.encode(texts, pairs, options)
}

func (t *Tokenizer) encode(texts, pairs []string, options any) (*Encoding, error) {
	opts, err := jsonText(options)
	if err != nil {
		return nil, err
	}
	data, lengths := joinTexts(texts)
	var pairData []byte
	var pairLengths []int64 // nil: no pairs
	if pairs != nil {
		pairData, pairLengths = joinTexts(pairs)
	}
	p, done := t.use()
	defer done()
	var out uintptr
	err = wrap(raw.Accx_tokenizer_encode(p, data, lengths, pairData, pairLengths, opts, &out))
	if err != nil {
		return nil, err
	}
	return newEncoding(out), nil
}

// Decode is transformers' decode: options {"skip_special_tokens": false,
// "clean_up_tokenization_spaces"}. Ids outside the vocabulary are skipped; a negative one is
// ErrInvalidArgument.
func (t *Tokenizer) Decode(ids []int64, options any) (string, error) {
	opts, err := jsonText(options)
	if err != nil {
		return "", err
	}
	p, done := t.use()
	defer done()
	var text string
	err = wrap(raw.Accx_tokenizer_decode(p, ids, opts, &text))
	return text, err
}

// ApplyChatTemplate is transformers' apply_chat_template(messages, tokenize=False). messages: JSON
// text, or anything encoding/json marshals to [{"role", "content", ...}, ...]. options (nil for the
// defaults): {"chat_template": a template or a name ("default", "tool_use"), "add_generation_prompt",
// "continue_final_message", "tools", "documents", "template_variables", "now"}. A template that raises
// or fails is ErrInvalidArgument naming it and the line.
func (t *Tokenizer) ApplyChatTemplate(messages, options any) (string, error) {
	text, _, err := t.chat(messages, options, false)
	return text, err
}

// ApplyChatTemplateEncoded is ApplyChatTemplate with the ids too (encoded without special tokens: the
// template writes them; Encode's options apply): one row whose "assistant_masks" marks the tokens of
// the template's {% generation %} blocks (transformers' return_assistant_tokens_mask).
func (t *Tokenizer) ApplyChatTemplateEncoded(messages, options any) (string, *Encoding, error) {
	return t.chat(messages, options, true)
}

func (t *Tokenizer) chat(messages, options any, encoded bool) (string, *Encoding, error) {
	msgs, err := jsonText(messages)
	if err != nil {
		return "", nil, err
	}
	opts, err := jsonText(options)
	if err != nil {
		return "", nil, err
	}
	p, done := t.use()
	defer done()
	var text string
	var out uintptr
	var outp *uintptr
	if encoded {
		outp = &out
	}
	if err := wrap(raw.Accx_tokenizer_apply_chat_template(p, msgs, opts, &text, outp)); err != nil {
		return "", nil, err
	}
	if encoded {
		return text, newEncoding(out), nil
	}
	return text, nil, nil
}

// Encoding is the rows of Tokenizer.Encode (transformers' BatchEncoding): one per text, more with
// overflowing windows. Each row has the fields "input_ids", "attention_mask", "token_type_ids",
// "special_tokens_mask", "offsets" (2 per token: [start, end) byte offsets into the text of the
// token's sequence), "sequence_ids", and "assistant_masks" from a chat template. Close it when done.
type Encoding struct{ handle }

func newEncoding(ptr uintptr) *Encoding {
	e := &Encoding{}
	track(e, &e.handle, ptr, "Encoding", raw.Acc_encoding_destroy)
	return e
}

func (e *Encoding) p() uintptr {
	if e == nil {
		return 0
	}
	return e.ptr
}

// Close releases the encoding. Idempotent.
func (e *Encoding) Close() error {
	if e != nil {
		raw.Acc_encoding_destroy(e.release())
	}
	return nil
}

// Len is the number of rows (0 for a closed encoding).
func (e *Encoding) Len() int {
	var n int64
	if err := raw.Acc_encoding_count(e.p(), &n); err != nil {
		return 0
	}
	runtime.KeepAlive(e)
	return int(n)
}

// Get is a copy of one row's field. An unknown field or row is ErrInvalidArgument naming it.
func (e *Encoding) Get(row int, field string) ([]int64, error) {
	defer runtime.KeepAlive(e)
	var n int64
	if err := wrap(raw.Accx_encoding_read(e.p(), int64(row), field, nil, &n)); err != nil {
		return nil, err
	}
	v := make([]int64, n)
	if err := wrap(raw.Accx_encoding_read(e.p(), int64(row), field, v, &n)); err != nil {
		return nil, err
	}
	return v, nil
}

// InputIDs is a row's "input_ids".
func (e *Encoding) InputIDs(row int) ([]int64, error) { return e.Get(row, "input_ids") }

// AttentionMask is a row's "attention_mask".
func (e *Encoding) AttentionMask(row int) ([]int64, error) { return e.Get(row, "attention_mask") }

// AssistantMasks is a row's "assistant_masks" (an encoding of ApplyChatTemplateEncoded only).
func (e *Encoding) AssistantMasks(row int) ([]int64, error) { return e.Get(row, "assistant_masks") }

// Offsets is a row's token offsets: [start, end) byte offsets into the text of the token's sequence.
func (e *Encoding) Offsets(row int) ([][2]int64, error) {
	v, err := e.Get(row, "offsets")
	if err != nil {
		return nil, err
	}
	out := make([][2]int64, len(v)/2)
	for i := range out {
		out[i] = [2]int64{v[2*i], v[2*i+1]}
	}
	return out, nil
}

// Sample is the index of the text a row encodes (transformers' overflow_to_sample_mapping).
func (e *Encoding) Sample(row int) (int, error) {
	var s int64
	err := wrap(raw.Acc_encoding_sample(e.p(), int64(row), &s))
	runtime.KeepAlive(e)
	return int(s), err
}

// ToBatch makes the rows a named batch of int64 tensors [rows, length]: "input_ids",
// "attention_mask", "token_type_ids" (and "assistant_masks"). Rows of different lengths (no padding)
// are ErrInvalidArgument.
func (e *Encoding) ToBatch() (*Batch, error) {
	var out uintptr
	err := wrap(raw.Acc_encoding_to_batch(e.p(), &out))
	runtime.KeepAlive(e)
	if err != nil {
		return nil, err
	}
	return newBatch(out), nil
}

// textStream is the Go side of GenerateText's callback.
type textStream struct {
	fn     func(piece string) bool
	pieces int
	err    error
}

// GenerateText is transformers' generate with a tokenizer and a TextStreamer: prompt is encoded with
// tok (options "add_special_tokens": true; false for a prompt a chat template rendered), generated
// with Generate's options, then {"stop_strings": [...], "skip_special_tokens": true}; it returns the
// new text only.
//
// onText (nil: none) is called on this goroutine with the text in pieces (never half a UTF-8
// character) and returns true to go on, false to stop. The model is in use meanwhile. A panic in
// onText stops generating and fails GenerateText with ErrCallback, which wraps the panic. See
// StreamText for a channel of pieces.
func (m *Model) GenerateText(tok *Tokenizer, prompt string, options any, onText func(piece string) bool) (string, error) {
	text, err := jsonText(options)
	if err != nil {
		return "", err
	}
	var opts *C.char // NULL: {}
	if text != "" {
		opts = C.CString(text)
		defer C.free(unsafe.Pointer(opts))
	}
	cprompt := C.CString(prompt)
	defer C.free(unsafe.Pointer(cprompt))
	var stream *textStream
	var user C.uintptr_t
	if onText != nil {
		stream = &textStream{fn: onText}
		h := cgo.NewHandle(stream)
		defer h.Delete()
		user = C.uintptr_t(h)
	}
	tp, done := tok.use()
	defer done()
	var out *C.char
	var msg [512]C.char
	st := C.accgo_generate_text(C.uintptr_t(m.p()), C.uintptr_t(tp), cprompt, opts, user, &out, &msg[0], C.size_t(len(msg)))
	runtime.KeepAlive(m)
	if st != C.ACC_OK {
		return "", &Error{Code: Code(st), Message: C.GoString(&msg[0])}
	}
	result := C.GoString(out)
	C.acc_text_free(out)
	if stream != nil && stream.err != nil {
		return "", &Error{
			Code:    CodeCallback,
			Message: fmt.Sprintf("the text callback panicked at piece %d; generation stopped", stream.pieces),
			cause:   stream.err,
		}
	}
	return result, nil
}

//export accGoTextPiece
func accGoTextPiece(user C.uintptr_t, piece *C.char, length C.size_t) (stop C.int32_t) {
	s := cgo.Handle(user).Value().(*textStream)
	s.pieces++
	defer func() {
		if r := recover(); r != nil { // a panic must not unwind through C frames
			s.err = fmt.Errorf("acc: generate text callback panicked: %v", r)
			stop = 1
		}
	}()
	if s.fn(C.GoStringN(piece, C.int(length))) {
		return 0
	}
	return 1
}

// StreamText is GenerateText on a goroutine of its own: the pieces arrive on the returned channel,
// which is closed when generation ends; wait returns the whole new text or the error once generation
// ends (it drops the pieces not read yet). Cancel ctx to stop generating early. The model must not be
// used by anyone else until wait returns.
func (m *Model) StreamText(ctx context.Context, tok *Tokenizer, prompt string, options any) (pieces <-chan string, wait func() (string, error)) {
	ch := make(chan string, 16)
	var text string
	var err error
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		defer close(ch)
		text, err = m.GenerateText(tok, prompt, options, func(piece string) bool {
			select {
			case ch <- piece:
				return true
			case <-ctx.Done():
				return false
			}
		})
		if err == nil && ctx.Err() != nil {
			err = ctx.Err()
		}
	}()
	return ch, func() (string, error) {
		for range ch { // the pieces nobody read: generation goes on to its end
		}
		<-finished
		return text, err
	}
}
