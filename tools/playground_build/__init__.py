"""The playgrounds' build, one module per page and its model (tools/build_playground.py runs them in turn).

    common            the pages' defaults (book/_static/playground/defaults.json), the check of every ONNX file
                      against PyTorch, the int8 trial
    numbers_to_words  the numbers page: the encoder-decoder
    language_model    the language-model page: the Shakespeare character model as a step model with a KV cache
    masks             the masks page: that model's first attention layer, the mask as an input
    brackets          the brackets page: the bracket classifier and its head that tracks partners
    inside            the inside page: that model's logit lens and every layer's attention
    ablation          the inside page's switches: that model with heads, layers, positions and norms switched off
    fill_blank        the fill-in-the-blank page: chapter 15's BERT, its guesses at a blank and the attention from it
    draw_digit        the draw-a-digit page: chapter 16's ViT, its probabilities and its class token's attention
    assistant         the three-models page: chapter 17's base, SFT and GRPO models, step models with a KV cache
    mend_line         the mend-the-line page: chapter 18's BART, its beam search's candidates for a line with a gap
    hear_keys         the hear-the-keys page: chapter 19's VioLA as a step model and its codec's decoder, sampled with
                      the pages' seeded numbers, and the Goertzel reading of the sound
    watch_think       the watch-it-think page: chapter 21's three addition models as step models, greedy and sampled
                      with the pages' seeded numbers, the program's verdicts and the vote

Each model's module has a `build(models)` that writes its ONNX file into the folder `models` and returns its entry
of meta.json and of expected.json (the brackets' also the int8 file's own answers, or None; the assistant's writes
three files, watch_think three and hear_keys two, and each returns an entry of meta.json for each).
"""
